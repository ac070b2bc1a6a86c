"""Run schedules for real: compile a Schedule into per-rank programs (program.py), run
them over a transport (torch.distributed gloo/NCCL, MPI) with an event loop per rank
(executor.py), check and time them like nccl-tests (bench.py), and launch or join jobs
(launch.py, job.py). Modules are imported explicitly; program.py needs no torch.
"""
