"""What every worker process is built from: flags, registration and heartbeats, cores, the process main."""
