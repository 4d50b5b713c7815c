"""Model x GPU performance profiles, shared by the simulator and the capacity model.

A profile describes one *instance* (an engine spanning ``gpus_per_instance`` GPUs):

- prefill time of one forward pass over a batch of uncached prompt chunks ``l_i``:
  ``prefill_a_s + prefill_b_s_per_token * sum(l_i) + prefill_c_s_per_token2 * sum(l_i**2)``
  (DistServe's form; the quadratic term is attention);
- decode step time for a batch of ``B`` sequences holding ``K`` context tokens in total:
  ``decode_a_s + decode_b_s_per_ctx_token * K + decode_c_s_per_seq * B``;
- KV bytes per token from the model's shapes: GQA/MHA ``2 * L * H_kv * d * bytes``, replicated
  when tensor parallelism exceeds the KV heads; MLA ``L * (kv_lora_rank + rope_dim) * bytes``.

Coefficients of the built-in profiles are derived from FLOP and memory-bandwidth budgets at
realistic utilisation (see ``docs/model.md``), and are plausible against published figures,
not measurements of a particular deployment. A TOML file with the same keys defines a custom
profile.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Final

from pdprobe.errors import UsageError


@dataclass(frozen=True)
class ModelShape:
    """The attention shapes that set KV-cache size."""

    name: str
    num_layers: int
    num_kv_heads: int = 0  # GQA/MHA
    head_dim: int = 0
    kv_lora_rank: int = 0  # MLA (DeepSeek-V2/V3 style); 0 for GQA
    qk_rope_head_dim: int = 0
    kv_dtype_bytes: int = 2  # bf16/fp16 = 2, fp8 = 1

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek-style): KV is one compressed latent per
        layer."""
        return self.kv_lora_rank > 0

    def kv_bytes_per_token_logical(self) -> int:
        """Bytes of KV per token for the whole model, without replication."""
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    def kv_bytes_per_token_physical(self, tensor_parallel: int) -> int:
        """Bytes held (and moved) per token across all TP ranks of one instance.

        When TP exceeds the KV heads each rank still holds one head, so heads are replicated
        (Qwen3-235B: 4 KV heads at TP8 moves twice the logical volume). MLA's latent is not
        sharded by TP; with data-parallel attention each token lives on one rank.
        """
        if self.is_mla:
            return self.kv_bytes_per_token_logical()
        heads_per_rank = math.ceil(self.num_kv_heads / tensor_parallel)
        return 2 * self.num_layers * heads_per_rank * tensor_parallel * self.head_dim * self.kv_dtype_bytes


@dataclass(frozen=True)
class Profile:
    """Speed and capacity of one prefill or decode instance of a model on a GPU type."""

    name: str
    description: str
    model: ModelShape
    gpu: str
    gpus_per_instance: int
    # prefill forward time = a + b * sum(l) + c * sum(l^2)
    prefill_a_s: float
    prefill_b_s_per_token: float
    prefill_c_s_per_token2: float
    prefill_max_batch_tokens: int  # token budget per prefill forward (chunk size)
    # decode step time = a + b * context_tokens + c * batch_size
    decode_a_s: float
    decode_b_s_per_ctx_token: float
    decode_c_s_per_seq: float
    decode_max_batch: int  # max_num_seqs
    kv_capacity_tokens: int  # KV-cache capacity of one decode instance, in tokens
    link_bytes_per_s: float  # usable KV-transfer bandwidth per instance (RDMA NICs it owns)
    link_base_latency_s: float  # per-transfer setup (handshake, descriptor post)
    tcp_bytes_per_s: float  # what the same path gives over TCP fallback
    max_model_len: int = 131072

    @property
    def kv_bytes_per_token(self) -> int:
        """Physical KV bytes per token on one instance (all its GPUs together), as held and
        transferred."""
        return self.model.kv_bytes_per_token_physical(self.gpus_per_instance)

    def prefill_time_s(self, tokens: float, tokens_sq: float | None = None) -> float:
        """Time of one prefill forward over ``tokens`` (``tokens_sq`` = sum of squares)."""
        sq = tokens * tokens if tokens_sq is None else tokens_sq
        return self.prefill_a_s + self.prefill_b_s_per_token * tokens + self.prefill_c_s_per_token2 * sq

    def decode_step_s(self, batch: float, context_tokens: float) -> float:
        """Seconds of one decode step for ``batch`` sequences holding ``context_tokens`` in all: a
        fixed cost plus one per context token and one per sequence."""
        return self.decode_a_s + self.decode_b_s_per_ctx_token * context_tokens + self.decode_c_s_per_seq * batch

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (for ``--list-profiles --format json`` and scenario files)."""
        return asdict(self)


LLAMA3_70B: Final = ModelShape("Llama-3.1-70B", num_layers=80, num_kv_heads=8, head_dim=128)
LLAMA3_8B: Final = ModelShape("Llama-3.1-8B", num_layers=32, num_kv_heads=8, head_dim=128)
QWEN3_235B: Final = ModelShape("Qwen3-235B-A22B", num_layers=94, num_kv_heads=4, head_dim=128)
DEEPSEEK_V3: Final = ModelShape("DeepSeek-V3", num_layers=61, kv_lora_rank=512,
                                qk_rope_head_dim=64)

GBPS: Final = 1e9 / 8  # bytes/s per Gbit/s

# Derivations (docs/model.md): prefill b = 2*active_params / (GPUs * peak_flops * MFU);
# c = 2*L*d_model / (GPUs * peak_flops * MFU) (causal attention, QK^T and AV);
# decode a = weight bytes per GPU / (HBM bandwidth * 0.75); b = KV bytes per token per GPU / HBM.
BUILTIN_PROFILES: Final[dict[str, Profile]] = {
    p.name: p
    for p in (
        Profile(
            name="llama3-70b-h100-tp4",
            description="Llama-3.1-70B BF16, TP4 on H100 SXM (4 x 400 Gb/s RDMA NICs per instance)",
            model=LLAMA3_70B, gpu="H100-SXM", gpus_per_instance=4,
            prefill_a_s=0.020, prefill_b_s_per_token=7.9e-5, prefill_c_s_per_token2=7.4e-10,
            prefill_max_batch_tokens=8192,
            decode_a_s=0.014, decode_b_s_per_ctx_token=3.6e-8, decode_c_s_per_seq=6.0e-5,
            decode_max_batch=256, kv_capacity_tokens=450_000,
            link_bytes_per_s=4 * 400 * GBPS * 0.8, link_base_latency_s=0.004,
            tcp_bytes_per_s=2 * 25 * GBPS * 0.6,
        ),
        Profile(
            name="llama3-70b-h200-tp4",
            description="Llama-3.1-70B BF16, TP4 on H200 SXM (4 x 400 Gb/s RDMA NICs per instance)",
            model=LLAMA3_70B, gpu="H200-SXM", gpus_per_instance=4,
            prefill_a_s=0.018, prefill_b_s_per_token=7.6e-5, prefill_c_s_per_token2=7.1e-10,
            prefill_max_batch_tokens=8192,
            decode_a_s=0.0105, decode_b_s_per_ctx_token=2.5e-8, decode_c_s_per_seq=5.5e-5,
            decode_max_batch=256, kv_capacity_tokens=1_150_000,
            link_bytes_per_s=4 * 400 * GBPS * 0.8, link_base_latency_s=0.004,
            tcp_bytes_per_s=2 * 25 * GBPS * 0.6,
        ),
        Profile(
            name="llama3-8b-h100",
            description="Llama-3.1-8B BF16 on one H100 SXM (one 400 Gb/s RDMA NIC)",
            model=LLAMA3_8B, gpu="H100-SXM", gpus_per_instance=1,
            prefill_a_s=0.008, prefill_b_s_per_token=3.3e-5, prefill_c_s_per_token2=5.3e-10,
            prefill_max_batch_tokens=8192,
            decode_a_s=0.0065, decode_b_s_per_ctx_token=5.2e-8, decode_c_s_per_seq=3.0e-5,
            decode_max_batch=256, kv_capacity_tokens=440_000,
            link_bytes_per_s=400 * GBPS * 0.8, link_base_latency_s=0.003,
            tcp_bytes_per_s=25 * GBPS * 0.6,
        ),
        Profile(
            name="deepseek-v3-h200-tp8",
            description="DeepSeek-V3 (MLA, MoE 37B active) FP8, 8 x H200 with DP attention",
            model=DEEPSEEK_V3, gpu="H200-SXM", gpus_per_instance=8,
            prefill_a_s=0.045, prefill_b_s_per_token=2.7e-5, prefill_c_s_per_token2=3.0e-10,
            prefill_max_batch_tokens=16384,
            decode_a_s=0.024, decode_b_s_per_ctx_token=4.0e-9, decode_c_s_per_seq=1.2e-4,
            decode_max_batch=512, kv_capacity_tokens=3_000_000,
            link_bytes_per_s=8 * 400 * GBPS * 0.8, link_base_latency_s=0.005,
            tcp_bytes_per_s=2 * 25 * GBPS * 0.6,
        ),
        Profile(
            name="qwen3-235b-h20-tp8",
            description="Qwen3-235B-A22B BF16, TP8 on H20 (4 x 200 Gb/s RoCE), as in Mooncake's test",
            model=QWEN3_235B, gpu="H20", gpus_per_instance=8,
            prefill_a_s=0.050, prefill_b_s_per_token=9.5e-5, prefill_c_s_per_token2=6.0e-10,
            prefill_max_batch_tokens=16384,
            decode_a_s=0.030, decode_b_s_per_ctx_token=1.5e-8, decode_c_s_per_seq=1.0e-4,
            decode_max_batch=256, kv_capacity_tokens=900_000,
            link_bytes_per_s=4 * 200 * GBPS * 0.82, link_base_latency_s=0.005,
            tcp_bytes_per_s=2 * 25 * GBPS * 0.6,
        ),
    )
}
DEFAULT_PROFILE: Final = "llama3-70b-h100-tp4"


def load_profile(name_or_path: str) -> Profile:
    """A built-in profile by name, or one read from a TOML file (see docs/model.md)."""
    if name_or_path in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return _profile_from_toml(path)
    known = ", ".join(sorted(BUILTIN_PROFILES))
    raise UsageError(f"unknown profile {name_or_path!r}", hint=f"use one of {known} or a TOML file")


def _profile_from_toml(path: Path) -> Profile:
    if path.is_dir():
        raise UsageError(f"--profile {path} is a folder", hint="name a profile TOML file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UsageError(f"{path}: profile file not found", hint="check the path") from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the profile ({exc.strerror})",
                         hint="check the path and permissions") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})", hint="fix the syntax") from exc
    base_name = data.pop("base", None)
    base = BUILTIN_PROFILES.get(base_name) if base_name else None
    if base_name and base is None:
        raise UsageError(f"{path}: base profile {base_name!r} is unknown",
                         hint=f"use one of {', '.join(sorted(BUILTIN_PROFILES))}")
    values: dict[str, Any] = base.to_dict() if base else {}
    if base is not None and "name" in data:
        # a renamed profile is a different model/GPU: don't inherit the base's description
        values.pop("description", None)
    model_values = dict(values.get("model", {}))
    model_values.update(data.pop("model", {}))
    values.update(data)
    values.setdefault("name", path.stem)
    values.setdefault("description", f"custom profile from {path.name}")
    try:
        values["model"] = ModelShape(**model_values)
        wanted = {f.name for f in fields(Profile)}
        unknown = set(values) - wanted
        if unknown:
            raise UsageError(f"{path}: unknown profile keys {sorted(unknown)}",
                             hint=f"allowed keys: {sorted(wanted)}")
        profile = Profile(**values)
    except TypeError as exc:
        raise UsageError(f"{path}: incomplete profile ({exc})",
                         hint="set `base = \"<built-in name>\"` and override only what differs") from exc
    _validate(profile, path)
    return profile


def _validate(p: Profile, where: Path) -> None:
    positive = ("gpus_per_instance", "prefill_b_s_per_token", "prefill_max_batch_tokens",
                "decode_a_s", "decode_max_batch", "kv_capacity_tokens", "link_bytes_per_s")
    for name in positive:
        if not getattr(p, name) > 0:
            raise UsageError(f"{where}: {name} must be positive (got {getattr(p, name)})",
                             hint="fix the profile")
    if p.kv_bytes_per_token <= 0:
        raise UsageError(f"{where}: model shape gives no KV bytes per token",
                         hint="set num_layers and num_kv_heads/head_dim (or kv_lora_rank for MLA)")
