"""``ccweave bench``: ccweave's schedules beside the incumbents' own collectives, run for
real (on the netns testbed or this machine), each measured time beside the model's."""
