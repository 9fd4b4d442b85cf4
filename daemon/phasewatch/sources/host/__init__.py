"""Sources that read this host: the unit's rank processes, /proc, the GPUs (NVML, the kernel's XIDs),
the server's health endpoint, NCCL RAS."""
