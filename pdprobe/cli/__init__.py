"""pdprobe cli layer."""
