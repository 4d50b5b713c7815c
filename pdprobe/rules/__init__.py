"""pdprobe rules layer."""
