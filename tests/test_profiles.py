"""Model x GPU profiles: KV bytes from shapes, TOML profiles and their validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdprobe.errors import UsageError
from pdprobe.profiles import BUILTIN_PROFILES, DEEPSEEK_V3, LLAMA3_70B, QWEN3_235B, load_profile


def test_kv_bytes_per_token_match_published_figures() -> None:
    # docs/model.md (KV bytes per token): Llama-3-70B 327,680 B/token; Qwen3-235B 192,512 logical and
    # 385,024 at TP8 (one KV head per rank, replicated); DeepSeek-V3 MLA ~70 KB.
    assert LLAMA3_70B.kv_bytes_per_token_logical() == 327_680
    assert QWEN3_235B.kv_bytes_per_token_logical() == 192_512
    assert QWEN3_235B.kv_bytes_per_token_physical(8) == 385_024
    assert QWEN3_235B.kv_bytes_per_token_physical(4) == 192_512
    assert 69_000 < DEEPSEEK_V3.kv_bytes_per_token_logical() < 71_000
    # Mooncake moved 12.62 GB for a 32K-token Qwen3-235B prompt at TP8.
    assert abs(QWEN3_235B.kv_bytes_per_token_physical(8) * 32_768 / 1e9 - 12.62) < 0.02


def test_builtin_profiles_are_plausible() -> None:
    for p in BUILTIN_PROFILES.values():
        prefill_tps = 8192 / p.prefill_time_s(8192)
        assert 5_000 < prefill_tps < 60_000, p.name
        step = p.decode_step_s(64, 64 * 2048)
        assert 0.005 < step < 0.08, p.name
        assert p.kv_capacity_tokens > 100_000


def test_toml_profile_with_base(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('base = "llama3-8b-h100"\nname = "mine"\nkv_capacity_tokens = 200000\n'
                    '[model]\nkv_dtype_bytes = 1\n')
    p = load_profile(str(path))
    assert p.name == "mine" and p.kv_capacity_tokens == 200_000
    assert p.kv_bytes_per_token == 65_536  # fp8 KV halves the bytes


@pytest.mark.parametrize("content", ['base = "nope"', "kv_capacity_tokens = ", 'base = "llama3-8b-h100"\ncolour = 1',
                                     'base = "llama3-8b-h100"\nlink_bytes_per_s = 0'])
def test_bad_profiles_are_usage_errors(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(UsageError):
        load_profile(str(path))


def test_unknown_profile_name_lists_choices() -> None:
    with pytest.raises(UsageError) as err:
        load_profile("gpt-9000")
    assert "llama3-70b-h100-tp4" in err.value.one_line()
