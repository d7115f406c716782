"""--lora-targets: the module names people pass to peft's ``target_modules`` (and its presets), parsed into the
matrix roles fitcheck.estimate.lora adapts."""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.errors import FitcheckError

# Module names people pass to peft's `target_modules`, mapped to fitcheck's matrix roles.
_NAME_TO_ROLES: dict[str, tuple[str, ...]] = {
    "q_proj": ("attn_q", "attn_q_a", "attn_q_b"), "k_proj": ("attn_k",), "v_proj": ("attn_v",),
    "o_proj": ("attn_output",), "gate_proj": ("ffn_gate", "ffn_gate_exps", "ffn_gate_shexp"),
    "up_proj": ("ffn_up", "ffn_up_exps", "ffn_up_shexp"), "down_proj": ("ffn_down", "ffn_down_exps", "ffn_down_shexp"),
    "kv_a_proj_with_mqa": ("attn_kv_a_mqa",), "kv_b_proj": ("attn_kv_b",),
    "q_a_proj": ("attn_q_a",), "q_b_proj": ("attn_q_b",),
    # Qwen1 (modeling_qwen.py): c_attn = fused q/k/v, c_proj = attention output *and* MLP output
    # (both modules are named c_proj), w1/w2 = the two MLP input projections.
    "c_attn": ("attn_qkv",), "c_proj": ("attn_output", "ffn_down"), "w1": ("ffn_up",), "w2": ("ffn_gate",),
    # Phi-3: fused qkv_proj and gate_up_proj.
    "qkv_proj": ("attn_qkv",), "gate_up_proj": ("ffn_gate_up",),
}
PRESETS = {
    "all-linear": None,  # peft's "all-linear": every linear layer except the output head
    "attention": ("attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_q_a", "attn_q_b",
                  "attn_kv_a_mqa", "attn_kv_b"),
}


@dataclass(frozen=True)
class LoraTargets:
    """A parsed --lora-targets value: a preset name or module names."""

    text: str
    roles: frozenset[str] | None   # None: all linear layers

    @property
    def label(self) -> str:
        return self.text


def parse_targets(text: str) -> LoraTargets:
    """'all-linear', 'attention' or a comma list of module names (q_proj,v_proj)."""
    t = text.strip().lower()
    if t in PRESETS:
        preset = PRESETS[t]
        return LoraTargets(t, None if preset is None else frozenset(preset))
    names = [n.strip() for n in t.split(",") if n.strip()]
    unknown = [n for n in names if n not in _NAME_TO_ROLES]
    if not names or unknown:
        raise FitcheckError(f"unknown LoRA target module(s): {', '.join(unknown) or text!r}",
                            "use all-linear, attention, or names such as q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    roles: set[str] = set()
    for n in names:
        roles.update(_NAME_TO_ROLES[n])
    return LoraTargets(",".join(names), frozenset(roles))
