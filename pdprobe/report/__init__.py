"""pdprobe report layer."""
