"""pdprobe: diagnose prefill/decode imbalance in disaggregated LLM serving clusters."""

__version__ = "0.1.0"
