"""The Engine protocol: what one engine module owns, with the behaviour most engines share.

An engine (transformers, vLLM, SGLang, llama.cpp, MLX) is one module under fitcheck.engines that subclasses
:class:`Engine` and says:

- what it runs: ``runs`` (the engine itself) and ``precisions`` (weights formats), its KV-cache types, how it
  spreads over GPUs (``splits``), what it keeps in RAM (``offloads``), whether it serves across nodes or
  expert parallel: its rows of the one capability table (fitcheck.engines.capabilities);
- how it holds memory: :meth:`Engine.memory`, per-device typed parts (fitcheck.estimate.result), and its KV
  cache's layout (:meth:`kv_elements_per_token`, :meth:`kv_layer_slots`, :meth:`sliding_cache`);
- what its batch means (``batch``: RESIDENT, every sequence held at once; POOLED, a KV pool serves as many
  full-length sequences as it holds and the rest queue);
- its defaults on a machine (:meth:`default_kv`, :meth:`resolve`), its launch commands (:meth:`command`,
  :meth:`launch_lines`) and the checkpoints it loads (:meth:`checkpoint`);
- its speed terms (:meth:`host_overhead` and the flags the decode formula reads).

The registry (fitcheck.engines) lists them in preference order; every question "does X run on Y" is asked of
these rows.  Adding an engine is adding one module and its tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from fitcheck.engines.capabilities import Runs, half_dtype
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.generate_step import AUTO_SAMPLING
from fitcheck.estimate.kv_cache import SlidingCache, layer_counts
from fitcheck.estimate.weights import packed_experts, weight_bytes
from fitcheck.model import spec as S
from fitcheck.speed.efficiency import KVTraffic

if TYPE_CHECKING:
    from fitcheck.estimate.formats import WeightFormat
    from fitcheck.estimate.weights import WeightBytes
    from fitcheck.model.spec import ModelSpec

RESIDENT = "resident"   # --batch sequences are all held at once (transformers, llama.cpp -np, MLX)
POOLED = "pooled"       # a KV pool holds as many full-length sequences as fit; requests beyond them queue


class Engine:
    """One engine's rows of the capability table and its behaviour.  Subclasses set the class attributes."""

    name: ClassVar[str]
    title: ClassVar[str]                       # how a sentence names it ("vLLM")
    runs: ClassVar[Runs]                       # where the engine itself runs
    precisions: ClassVar[Mapping[str, Runs]]   # weights format -> where it runs with this engine
    kv_dtypes: ClassVar[tuple[str, ...]]       # KV-cache types it has (auto resolves to one of them)
    splits: ClassVar[str] = "layers"           # how it spreads over GPUs: "layers" | "tensor"
    kv_mla_latent: ClassVar[bool] = True       # MLA's compressed latent cached (False: K and V per head)
    # Weights it keeps in RAM while the GPU runs the rest: "layers" (llama.cpp -ngl), "experts" (llama.cpp
    # --n-cpu-moe / --cpu-moe), "streamed" (vLLM --cpu-offload-gb, over PCIe every forward).
    offloads: ClassVar[frozenset[str]] = frozenset()
    multi_node: ClassVar[bool] = False         # serves across nodes (--nodes > 1)
    expert_parallel: ClassVar[bool] = False    # has an expert-parallel MoE layout (--expert-parallel)
    cuda_graphs: ClassVar[bool] = False        # replays a decode step as CUDA graphs
    batch: ClassVar[str] = RESIDENT
    distribution: ClassVar[str | None] = None  # the PyPI package whose installed release the answer names
    uses_torch: ClassVar[bool] = True           # runs on this Python environment's torch (its driver and build matter)
    runs_installed_package: ClassVar[bool] = False  # run from this environment's package (vLLM), checked as such
    # The lower-precision weights a practitioner reaches for with this engine (the quantize route).
    lower_precisions: ClassVar[tuple[str, ...]] = ()
    loads_gguf_files: ClassVar[bool] = False   # a .gguf file (or Ollama blob) is this engine's to load
    keeps_packed_experts: ClassVar[bool] = False  # an MXFP4 checkpoint's experts stay packed at 16/32 bits
    # Device kinds where it is the default before the preference order (MLX on Apple GPUs).
    preferred_on: ClassVar[frozenset[str]] = frozenset()

    @property
    def route_family(self) -> str:
        """Which family of alternatives it is in, for the ranking's one-per-family rule (fitcheck.search.rank)."""
        return "serving" if self.pooled else self.name

    @property
    def pooled(self) -> bool:
        return self.batch == POOLED

    def __repr__(self) -> str:
        return f"<engine {self.name}>"

    # ---- what it runs --------------------------------------------------------------------------
    def runs_here(self, precision: str, kind: str, cc: float | None) -> str | None:
        """Why ``precision`` with this engine cannot run on this device kind, or None when it runs."""
        problem = self.runs.problem(kind, cc)
        if problem:
            return problem
        entry = self.precisions.get(precision)
        if entry is None:
            return f"{self.name} does not load {precision}"
        problem = entry.problem(kind, cc)
        return f"{precision} with {self.name}: {problem}" if problem else None

    def runs_model_here(self, spec: ModelSpec, precision: str, kind: str, cc: float | None) -> str | None:
        """runs_here for this checkpoint: an engine that keeps an MXFP4 checkpoint's experts packed at 16/32 bits
        needs its MXFP4 kernels whatever the precision asked."""
        problem = self.runs_here(precision, kind, cc)
        if problem or not self.keeps_packed_experts or "mxfp4" not in self.precisions or precision == "mxfp4":
            return problem

        if weight_format(precision).family != "float" or spec.stored_groups().get(S.EXPERTS) != "mxfp4":
            return None
        packed = self.precisions["mxfp4"].problem(kind, cc)
        return f"{precision} with {self.name} keeps the checkpoint's MXFP4 experts packed: {packed}" if packed else None

    def default_here(self, kind: str) -> bool:
        """Whether this engine is the default on this device kind before the registry's preference order."""
        return kind in self.preferred_on

    def default_kv(self, precision: str, kind: str, cc: float | None) -> str:
        """The engine's own KV-cache default: the compute dtype (fp16 on GPUs without bf16, fp32 for fp32
        weights)."""
        if precision in ("fp16", "fp32", "bf16"):
            return precision
        return half_dtype(kind, cc)

    def default_precision(self, kind: str, cc: float | None, cpu_features: frozenset[str]) -> tuple[str, str] | None:
        """(precision, why) this engine takes on its own when none is asked, or None: the machine's best float
        (fitcheck.engines.default_precision)."""
        return None

    # ---- its weights ---------------------------------------------------------------------------
    def stored_needs(self, precision: str) -> str:
        """What keeping a checkpoint stored as ``precision`` needs installed ('' when nothing more)."""
        return ""

    def weight_format(self, spec: ModelSpec, precision: str) -> WeightFormat:
        """The weights this engine holds for ``precision`` (an MXFP4 checkpoint's experts kept packed where
        ``keeps_packed_experts``)."""
        fmt = weight_format(precision)
        return packed_experts(spec, fmt) if self.keeps_packed_experts else fmt

    def weights(self, spec: ModelSpec, precision: str) -> WeightBytes:
        """The weight bytes this engine holds for ``precision``, by group."""
        return weight_bytes(spec, self.weight_format(spec, precision))

    # ---- its KV cache --------------------------------------------------------------------------
    def kv_elements_per_token(self, spec: ModelSpec) -> int:
        """Cached elements per token per full-attention layer, as this engine stores them."""
        if spec.is_mla and not self.kv_mla_latent:
            return spec.mla_expanded_kv_elements_per_token
        return spec.kv_elements_per_token

    def kv_layer_slots(self, spec: ModelSpec) -> tuple[int, int]:
        """(full-attention, sliding-window) layers the cache allots memory for."""
        return layer_counts(spec)

    def sliding_cache(self, spec: ModelSpec, *, tokens: int, prompt_tokens: int | None = None,
                      transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache:
        """What the engine keeps per sequence of a ``tokens``-token context in a sliding-window layer."""
        window = spec.sliding_window or 0
        return SlidingCache(tokens, min(tokens, window), f"window {window:,}: {self.title} frees the tokens "
                                                         "outside it")

    # ---- its steps of plan resolution (fitcheck.plan.inference) --------------------------------------
    batch_words: ClassVar[str] = "concurrent sequences"   # what --batch means, in the assumptions
    # How a sentence names its way of serving across nodes ("llama.cpp's RPC backend").
    multi_node_words: ClassVar[str] = ""
    nodes_words: ClassVar[str] = ""   # how an alternative's title names its layout over more nodes

    def default_why(self, precision: str) -> str:
        """Why the capability table's default engine for ``precision`` here is this one (the assumption's words)."""
        return f"the engine that runs {precision} here"

    def keeps_stored(self, name: str, kind: str, cc: float | None,
                     transformers_version: str | None) -> tuple[bool, str] | None:
        """Whether this engine, the first that loads a checkpoint's stored format ``name``, keeps it as stored here
        (True) or loads it otherwise (False, and why); None: the capability table decides."""
        return None

    def settings(self, step: Any) -> None:
        """The engine's own defaults (fitcheck.plan.inference.InferenceStep: notes, problems, plan fields).  The
        base engine has none; options that set another engine's tensors are kept and said not to be counted."""
        req = step.req
        if req.attention is not None and req.engine is not None:
            raise FitcheckError(f"--attention applies to engine transformers, not {self.name}")
        if req.sampling not in (None, AUTO_SAMPLING):
            # kept (an alternative that changes the engine keeps the request's other answers), not modelled
            step.note("sampling", str(req.sampling), f"from --sampling; {self.name}'s own sampler buffers are not "
                      "counted (--sampling sets transformers generate()'s tensors)", "--sampling")

    def reservation(self, step: Any) -> None:
        """What the engine reserves up front (vLLM, SGLang): its defaults, recorded on ``step``."""

    def layout(self, plan: Any) -> str:
        """How ``plan`` spreads over GPUs and nodes, in words ('' on one device or a layer split)."""
        return ""

    def layout_key(self, plan: Any) -> str:
        """The layout of ``plan`` over several GPUs, as the JSON documents name it."""
        return "layer-split"

    # ---- its memory, its commands ----------------------------------------------------------------

    def memory(self, spec: ModelSpec, plan: Any) -> Any:
        """(devices, facts, notes) of serving ``spec`` as ``plan`` says (fitcheck.engines.estimate_inference)."""
        raise NotImplementedError

    def command(self, model_id: str, plan: Any, repos: Mapping[str, str], local: bool = False) -> str:
        """The command that runs ``plan`` with this engine."""
        raise NotImplementedError

    def held_precision(self, spec: ModelSpec, precision: str) -> tuple[str, str] | None:
        """(precision, why) to default to instead of ``precision`` when the model's published builds for this
        engine hold other types only; None to keep it."""
        return None

    def checkpoint_known(self, spec: ModelSpec, plan: Any) -> bool:
        """Whether the command for ``plan`` loads a checkpoint that exists (fitcheck.engines.checkpoints): an
        alternative whose checkpoint fitcheck cannot name ranks after every one it can."""
        return True

    def launch_lines(self, model_id: str, plan: Any, repos: Mapping[str, str]) -> tuple[str, ...]:
        """What to run on each node for a plan over several nodes (empty for one machine)."""
        return ()

    def gpus_for(self, visible: int, spec: ModelSpec, nodes: int, expert_parallel: bool) -> int:
        """GPUs of one node the engine spreads over by default: all of them (layer split), or for tensor
        parallelism the largest power of two that divides the attention heads."""
        if visible < 1:
            return 0
        if self.splits != "tensor":
            return visible
        tp = 1
        while tp * 2 <= visible and spec.num_attention_heads % (tp * 2) == 0:
            tp *= 2
        return tp

    # ---- speed (fitcheck.speed.decode asks these) -------------------------------------------------
    fp8_gemms: ClassVar[bool] = False      # an FP8 checkpoint's linears run as FP8 GEMMs on FP8 tensor cores
    host_per_layer: ClassVar[Any] = None   # host time per decoder layer per decode step (an Efficiency)

    def host_overhead(self, spec: ModelSpec | None, precision: str) -> Any:
        """The host time per decoder layer per decode step (a fitcheck.speed.efficiency.Efficiency)."""
        return self.host_per_layer

    def host_layers(self, spec: ModelSpec, batch: int, transformers_version: str | None) -> float:
        """Decode-step host work in units of one decoder layer."""
        return float(spec.num_layers)

    def serial_host(self, spec: ModelSpec, precision: str, transformers_version: str | None) -> bool:
        """Whether a decode step's host (or kernel-latency) time adds to its device time instead of hiding it."""
        return False

    def extra_host(self, spec: ModelSpec, precision: str, batch: int, transformers_version: str | None,
                   host: Any) -> Any:
        """Host seconds per decode step beyond the layers' (an Efficiency), or None."""
        return None

    def kv_traffic(self, spec: ModelSpec) -> Any:
        """How many times a decode step moves the KV cache (fitcheck.speed.efficiency.KVTraffic): read in place."""
        return KVTraffic(1)

    def read_devices(self, plan: Any) -> int:
        """GPUs whose memory a decode step reads at once: a layer split runs its GPUs in turn."""
        return 1

    def streamed_bytes(self, plan: Any) -> int:
        """Weight bytes each GPU takes over PCIe in every forward pass (vLLM --cpu-offload-gb)."""
        return 0

    def prefill_copy_seconds(self, spec: ModelSpec, plan: Any, machine: Any) -> tuple[float, bool]:
        """(seconds per prompt token moving weights from RAM to the GPU, whether the GPU then runs the whole
        prefill)."""
        return 0.0, False

    def decode_comm(self, spec: ModelSpec, plan: Any, machine: Any) -> Any:
        """What a decode step waits for between GPUs and nodes (fitcheck.estimate.distributed.DecodeComm), or None."""
        return None
