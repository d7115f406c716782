"""QLoRA's recipe step by the HF Trainer on the CPU: the loss path and the residual stream, from the profiler.

    python -m benchmarks.measure.kbit_step [--out FILE]
    VENV/bin/python -m benchmarks.measure.kbit_step --out FILE --append   # another transformers release

The HF recipe for QLoRA (peft ``prepare_model_for_kbit_training``, then ``Trainer`` with
``bf16=True`` and gradient checkpointing) casts every parameter that is not quantized —
embeddings, norms, lm_head — to fp32 (peft utils/other.py), and the Trainer runs the forward
under autocast (accelerate).  The CPU has no bitsandbytes 4-bit kernels, so the linears stay
bf16 and frozen here (what the quantized base keeps for backward is the same: nothing of a
frozen linear's input); everything else follows the recipe.  Each case runs one Trainer step,
profiled from the step's start, in a fresh process:

- ``loss``, ``loss-b2``: 2 narrow layers and a 151,936-token vocabulary, so the loss path dwarfs
  the rest; the live-tensor peak per token and vocabulary entry is the loss path's bytes.  At
  batch 1 the shifted slice ``logits[..., :-1, :]`` is contiguous already and ``.contiguous()``
  copies nothing; at batch 2 it is not (transformers 4.46–4.48 then copy it).
- ``residual-dtype``: the dtype of every decoder layer's input under autocast with the recipe's
  fp32 embeddings (no step; seconds).
- ``residual-fp32`` / ``residual-bf16`` (not run by default: about an hour each on 2 busy cores):
  8 wide layers and a small vocabulary, with
  checkpointing, the embeddings fp32 (the recipe) or left bf16; the difference between the two
  peaks, per layer, token and hidden unit, is what the fp32 embedding output does to the
  checkpointed layer inputs (the residual stream stays in the embedding's dtype: fp32 + bf16 is
  fp32).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

from .fresh_process import emit, write_fresh_rows
from .profiler_peak import live_tensor_peak

RESULTS = Path(__file__).resolve().parents[1] / "results"
CASES = {
    # case: (vocab, hidden, intermediate, layers, heads, kv_heads, tokens per sequence, fp32 embeddings, batch)
    "loss": (151936, 128, 256, 2, 2, 1, 512, True, 1),
    "loss-b2": (151936, 128, 256, 2, 2, 1, 256, True, 2),
    "residual-fp32": (512, 1024, 2048, 8, 8, 2, 1024, True, 1),
    "residual-bf16": (512, 1024, 2048, 8, 8, 2, 1024, False, 1),
    "residual-dtype": (256, 64, 128, 2, 2, 1, 8, True, 1),  # residual_dtypes(): the dtypes, no step
}
DEFAULT_CASES = ("loss", "loss-b2", "residual-dtype")
FIELDS = ("case", "vocab", "hidden", "layers", "tokens", "step_peak_bytes", "bytes_per_vocab_token", "op_at_peak",
          "torch_version", "transformers_version", "peft_version", "date")


def residual_dtypes() -> dict:
    """The dtype of each decoder layer's input under autocast, embeddings fp32 as the recipe leaves them."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    for name, module in model.named_modules():
        if name == "lm_head" or "norm" in name.split(".")[-1] or name.endswith("embed_tokens"):
            module.float()
    seen: list[str] = []

    def hook(mod, args, kwargs):
        seen.append(str((args[0] if args else kwargs["hidden_states"]).dtype).replace("torch.", ""))

    for layer in model.model.layers:
        layer.register_forward_pre_hook(hook, with_kwargs=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=torch.randint(0, 256, (1, 8)))
    return {"case": "residual-dtype", "vocab": 256, "hidden": 64, "layers": 2, "tokens": 8, "step_peak_bytes": "",
            "bytes_per_vocab_token": "", "op_at_peak": f"layer inputs {'/'.join(seen)}; logits "
            f"{str(out.logits.dtype).replace('torch.', '')}", "torch_version": torch.__version__.split("+")[0],
            "transformers_version": transformers.__version__, "peft_version": "",
            "date": datetime.date.today().isoformat()}


def measure(case: str) -> dict:
    if case == "residual-dtype":
        return residual_dtypes()
    import peft
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    vocab, hidden, inter, layers, heads, kv, tokens, fp32_emb, batch = CASES[case]
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                   tie_word_embeddings=False, max_position_embeddings=4096)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(torch.bfloat16)
    for p in model.parameters():
        p.requires_grad_(False)
    # prepare_model_for_kbit_training: what is not quantized goes to fp32 (the 4-bit linears stay).
    for name, module in model.named_modules():
        if name == "lm_head" or "norm" in name.split(".")[-1] or (fp32_emb and name.endswith("embed_tokens")):
            module.float()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear", lora_dropout=0.0,
                                                       task_type="CAUSAL_LM"))
    ids = torch.randint(3, vocab, (tokens,))

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4 * batch

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": ids, "labels": ids}

    peaks: list[tuple[int, str]] = []

    class Profile(transformers.TrainerCallback):
        prof = None

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 1:
                self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
                self.prof.__enter__()

        def on_step_end(self, args, state, control, **kw):
            if self.prof is not None:
                self.prof.__exit__(None, None, None)
                peaks.append(live_tensor_peak(self.prof))
                self.prof = None

    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, use_cpu=True, bf16=True, per_device_train_batch_size=batch,
                                              max_steps=2, report_to=[], save_strategy="no", logging_steps=100,
                                              gradient_checkpointing=False, dataloader_num_workers=0,
                                              remove_unused_columns=False)
        transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=[Profile()]).train()
    peak, innermost = peaks[0]
    return {"case": case, "vocab": vocab, "hidden": hidden, "layers": layers, "tokens": tokens * batch,
            "step_peak_bytes": peak, "bytes_per_vocab_token": round(peak / (tokens * batch * vocab), 2),
            "op_at_peak": innermost, "torch_version": torch.__version__.split("+")[0],
            "transformers_version": transformers.__version__, "peft_version": peft.__version__,
            "date": datetime.date.today().isoformat()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / f"cpu-kbit-step-{datetime.date.today().isoformat()}.csv")
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated, of: " + ", ".join(CASES))
    ap.add_argument("--append", action="store_true", help="add rows to --out (another release's venv)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        emit(measure(args.one))
        return 0
    write_fresh_rows(args.out, FIELDS, "benchmarks.measure.kbit_step", args.cases.split(","),
                     lambda row: f"{row['case']:14s} transformers {row['transformers_version']}: "
                                 f"{row['step_peak_bytes']} B ({row['bytes_per_vocab_token']} B per vocabulary "
                                 f"entry per token) at {row['op_at_peak']}", append=args.append)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
