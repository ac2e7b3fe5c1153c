"""FusedSession: the Kokoro runtime graph run as onnxruntime segments + fused numba chain kernels.

At load the runtime graph is searched for the vocoder's conv-input chains (``find_chains``:
[InstanceNormalization ->] Snake -> DynamicQuantizeLinear -> int8 shift -> Pad -> Slices ->
Concat), the graph is cut around them into segments in its own topological order (each chain
just before its first reader), and each segment becomes an onnxruntime session (graph
optimizations off, the engine's thread count, one arena shared by all). The nodes are taken in a
depth-first order, so parallel branches run one after the other and fewer tensors are alive at
once. ``run`` walks the steps in order, passing only live tensors and dropping each after its last
consumer; a long call gives its big kernel buffers and the arena's free regions back at its end.

The ``fused_ops`` patterns (the harmonic source's STFT, the generator's bias + residual Adds) are
taken out the same way and run as their own steps; a pattern with several outputs is placed as
one block in the order, and a pattern is always placed before any step that reads it.

Each chain runs as ``kernels.snake_stats`` + ``kernels.snake_quantize_im2col`` on channel ranges
split over a small thread pool (the calling thread takes one range). With ``chains="ort"`` the
chains run as onnxruntime segments of their own nodes instead: bit-identical to the whole graph,
which is how the partitioning itself is tested.

Calls share only the thread pool and the kernels' buffer free lists (taken and given back under a
lock), so two concurrent ``run`` calls are safe. The cost is visible in the load log line (load
and kernel-compile seconds, chains, segments) and in docs/bench-log/kokoro.md (memory, per-call time).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cosyedge.engines.kokoro import crop as crop_graph
from cosyedge.engines.kokoro import fused_ops
from cosyedge.engines.kokoro.graph_index import GraphIndex, find_matches
from cosyedge.engines.kokoro.sessions import register_shared_arena, segment_session_options
from cosyedge.errors import EngineError
from cosyedge.host.heap import trim_heap

logger = logging.getLogger(__name__)

CHAIN_PREFIX = "/decoder/"
RUNNER_KIND = "fused_chains"
# Bump when the kernels or the partitioning change (2: the fused STFT; 3: int8 upsamplers), together
# with cosyedge.export.kokoro.assembly.RUNTIME_VERSION.
RUNNER_VERSION = 3
# A call whose largest kernel buffer is above this many bytes (the levers input, 6.6 s of audio,
# needs 45 MB) gives its memory back when it ends: kernel buffers above it are dropped and
# onnxruntime's shared arena is shrunk. Shorter calls keep both, which saves their page faults.
KEEP_BYTES = 64 << 20


@dataclass
class Chain:
    """One conv-input chain: its input tensors, constants, im2col geometry and the three tensors
    the rest of the graph reads from it (the int8 im2col, the DQL scale, the int8 zero point)."""

    x: str
    gamma: str | None
    beta: str | None
    eps: float
    alpha: np.ndarray
    inv_alpha: np.ndarray
    taps: int
    dilation: int
    pad_lo: int
    pad_hi: int
    col: str
    scale: str
    zero_point: str
    zero_point_shape: tuple[int, ...] = ()  # the graph's shift constant broadcasts the scalar zero point
    nodes: list = field(repr=False, default_factory=list)
    weights: str | None = None  # per-frame weights of the norm's statistics (crop.py), if cropped

    @property
    def inputs(self) -> list[str]:
        return [self.x] + ([self.gamma, self.beta] if self.gamma else []) + ([self.weights] if self.weights else [])

    @property
    def outputs(self) -> list[str]:
        return [self.col, self.scale, self.zero_point]


def _match_chain(g: GraphIndex, dql: Any) -> Chain:
    """The chain ending in ``dql``'s consumers, or ValueError saying why this DQL is not one."""
    from onnx import helper

    add = g.producer.get(dql.input[0])
    if add is None or add.op_type != "Add":
        raise ValueError("input is not a Snake Add")
    mul_inv = [g.producer.get(name) for name in add.input]
    k = next((i for i, node in enumerate(mul_inv) if node is not None and node.op_type == "Mul"
              and any(inp in g.inits for inp in node.input)), None)
    if k is None:
        raise ValueError("no Mul(1/alpha) into the Snake Add")
    mul_inv, n_name = mul_inv[k], add.input[1 - k]
    square_name = next(name for name in mul_inv.input if name not in g.inits)
    inv_alpha = next(g.const(name) for name in mul_inv.input if name in g.inits)
    square = g.producer.get(square_name)
    if square is None or square.op_type != "Mul" or square.input[0] != square.input[1]:
        raise ValueError("no sin^2")
    sin = g.producer.get(square.input[0])
    if sin is None or sin.op_type != "Sin":
        raise ValueError("no Sin")
    mul_alpha = g.producer.get(sin.input[0])
    if mul_alpha is None or mul_alpha.op_type != "Mul" or n_name not in mul_alpha.input:
        raise ValueError("no Mul(alpha, n) into the Sin")
    alpha = g.const(next(name for name in mul_alpha.input if name != n_name))
    if {u.name for u in g.users(n_name)} != {mul_alpha.name, add.name}:
        raise ValueError("the Snake input has other consumers")
    nodes = [mul_alpha, sin, square, mul_inv, add, dql]
    norm = g.producer.get(n_name)
    gamma = beta = None
    eps = 0.0
    x = n_name
    if norm is not None and norm.op_type == "InstanceNormalization":
        x, gamma, beta = norm.input
        eps = float({a.name: helper.get_attribute_value(a) for a in norm.attribute}.get("epsilon", 1e-5))
        nodes.insert(0, norm)
        x = _skip_channel_bias(g, x, norm, alpha.size, nodes)
    quantized, scale, zero_u8 = dql.output
    sub_q = g.only_user(quantized, "Sub")
    cast_q = g.only_user(sub_q.output[0], "Cast")
    sub_z = g.only_user(zero_u8, "Sub")
    cast_z = g.only_user(sub_z.output[0], "Cast")
    shifts = [g.const(next(n for n in sub.input if n in g.inits)) for sub in (sub_q, sub_z)]
    if any(shift.size != 1 or int(shift.reshape(-1)[0]) != 128 for shift in shifts):
        raise ValueError("the int8 shift is not 128")
    pad = g.only_user(cast_q.output[0], "Pad")
    pads = g.const(pad.input[1]).reshape(-1).tolist()
    if len(pads) != 6 or any(pads[i] for i in (0, 1, 3, 4)) or pad.input[2] != cast_z.output[0]:
        raise ValueError("not a time-axis zero-point Pad")
    slices = g.users(pad.output[0])
    starts = []
    for node in slices:
        if node.op_type != "Slice" or len(node.input) < 4:
            raise ValueError("Pad does not feed Slices only")
        axis = g.const(node.input[3]).reshape(-1).tolist()
        step = g.const(node.input[4]).reshape(-1).tolist() if len(node.input) > 4 and node.input[4] else [1]
        if axis not in ([2], [-1]) or step != [1]:
            raise ValueError("not a unit-step time Slice")
        starts.append(int(g.const(node.input[1]).reshape(-1)[0]))
    concat = g.only_user(slices[0].output[0], "Concat")
    taps = len(slices)
    order = [g.producer[name] for name in concat.input]
    starts = [starts[slices.index(node)] for node in order]
    dilation = starts[1] - starts[0] if taps > 1 else 1
    if taps < 2 or starts != [j * dilation for j in range(taps)] or dilation < 1 \
            or {a.name: a.i for a in concat.attribute}.get("axis") != 1:
        raise ValueError("the Slices are not one dilated im2col")
    for node, start in zip(order, starts):  # each tap ends (taps-1-j)*d before the padded end
        end = int(g.const(node.input[2]).reshape(-1)[0])
        rest = (taps - 1) * dilation - start
        if end != (-rest if rest else np.iinfo(np.int64).max):
            raise ValueError("a tap's end is not the im2col's")
    nodes += [sub_q, cast_q, sub_z, cast_z, pad, *order, concat]
    chain = Chain(x=x, gamma=gamma, beta=beta, eps=eps, alpha=alpha.astype(np.float32).reshape(-1),
                  inv_alpha=inv_alpha.astype(np.float32).reshape(-1), taps=taps, dilation=dilation,
                  pad_lo=int(pads[2]), pad_hi=int(pads[5]), col=concat.output[0], scale=scale,
                  zero_point=cast_z.output[0], zero_point_shape=shifts[1].shape, nodes=nodes)
    inside = {id(node) for node in nodes}
    leaked = [out for node in nodes for out in node.output
              if out not in chain.outputs and any(id(u) not in inside for u in g.users(out))]
    graph_outputs = {o.name for o in g.graph.output}
    if leaked or graph_outputs & {out for node in nodes for out in node.output if out not in chain.outputs}:
        raise ValueError(f"inner tensors are read outside the chain: {leaked[:3]}")
    if chain.alpha.size != chain.inv_alpha.size:
        raise ValueError("alpha and 1/alpha differ in size")
    return chain


def _skip_channel_bias(g: GraphIndex, x: str, norm: Any, channels: int, nodes: list) -> str:
    """If ``x`` is ``y + b`` with a constant per-channel ``b`` and read only by the instance norm,
    return ``y`` (adding the Add to ``nodes``): the norm subtracts each channel's mean, so the bias
    cancels (exactly in arithmetic, to float rounding here) and one full pass is saved."""
    add = g.producer.get(x)
    if add is None or add.op_type != "Add" or [u.name for u in g.users(x)] != [norm.name] \
            or x in {o.name for o in g.graph.output}:
        return x
    consts = [name for name in add.input if name in g.inits]
    if len(consts) != 1:
        return x
    bias = g.const(consts[0])
    if bias.size != channels or bias.ndim < 2 or bias.shape[-1] != 1:  # [C, 1] or [1, C, 1]: per channel
        return x
    nodes.insert(0, add)
    return next(name for name in add.input if name != consts[0])


def find_chains(graph: Any, prefix: str = CHAIN_PREFIX) -> list[Chain]:
    """Every conv-input chain under ``prefix`` (node names), in graph order."""
    return find_matches(graph, "DynamicQuantizeLinear", prefix, _match_chain, "a fusable chain")


# --- steps ------------------------------------------------------------------------------------


class Segment:
    """An onnxruntime session over a run of graph nodes."""

    def __init__(self, session: Any, inputs: list[str], outputs: list[str]) -> None:
        self.session, self.inputs, self.outputs = session, inputs, outputs

    def run(self, tensors: dict[str, np.ndarray], state: "RunState") -> dict[str, np.ndarray]:
        values = self.session.run(self.outputs, {name: tensors[name] for name in self.inputs}, state.run_options)
        return dict(zip(self.outputs, values))


class Buffers:
    """Reusable byte buffers for the kernels' outputs and scratch, shared by all calls (thread-safe).

    Fresh buffers cost page faults on every call: buffers made per call cost ~8 % of the whole
    graph's CPU time on the levers input against buffers kept between calls (measured, interleaved).
    The buffers of a short call (the chains' im2col, up to 1.4 KB per time step of the last stage,
    and the fused ops' outputs) stay for the next call; a long call
    drops those above ``FusedSession.keep_bytes`` when it ends (``release_above``: ~300 MB after a
    510-phoneme sentence, twice with two calls at once). Each role has its own free list (a shared one ends up holding only
    im2col-sized buffers); ``take`` hands out the smallest free buffer of the role that fits (or a
    new one), ``give`` returns it; at most ``keep`` free buffers per role are held, the largest, and
    none under half the size of the last one given back (left from a shorter input)."""

    def __init__(self, keep: int = 2) -> None:
        self._free: dict[str, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self._keep = keep

    def take(self, role: str, shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """(array of ``shape``/``dtype``, its raw buffer to ``give`` back under the same role)."""
        nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        with self._lock:
            free = self._free.setdefault(role, [])
            fits = [i for i, b in enumerate(free) if b.size >= nbytes]
            raw = free.pop(min(fits, key=lambda i: free[i].size)) if fits else None
        if raw is None:
            raw = np.empty(nbytes, np.uint8)
        return raw[:nbytes].view(dtype).reshape(shape), raw

    def give(self, role: str, raw: np.ndarray) -> None:
        with self._lock:
            # a free buffer under half this size is left from a shorter input: let it go
            free = [b for b in self._free.get(role, []) if 2 * b.size >= raw.size] + [raw]
            free.sort(key=lambda b: b.size)
            self._free[role] = free[-self._keep:]

    def clear(self) -> None:
        with self._lock:
            self._free.clear()

    def release_above(self, nbytes: int) -> int:
        """Drop the free buffers larger than ``nbytes`` (left from a long input); return the bytes
        dropped. Buffers in use stay with their call, which drops them when it ends."""
        with self._lock:
            dropped = 0
            for role, free in self._free.items():
                dropped += sum(b.size for b in free if b.size > nbytes)
                self._free[role] = [b for b in free if b.size <= nbytes]
        return dropped

    def held_bytes(self) -> int:
        with self._lock:
            return sum(b.size for free in self._free.values() for b in free)


@dataclass
class RunState:
    """What one ``run`` call uses: the shared buffers, and which of its live tensors sit in one."""

    buffers: Buffers
    owned: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)  # tensor name -> (role, raw buffer)
    largest: int = 0  # bytes of the largest kernel buffer this call used
    run_options: Any = None  # onnxruntime RunOptions for the next segment (None: the defaults)
    frame_weights: dict[int, np.ndarray] = field(default_factory=dict)  # the crop's weights by tensor length


class _Kernel:
    """One chain on the numba kernels, channel ranges spread over ``pool`` + the calling thread."""

    def __init__(self, chain: Chain, pool: ThreadPoolExecutor | None, parts: int) -> None:
        self.chain, self.pool, self.parts = chain, pool, parts
        self.inputs = chain.inputs
        self.outputs = chain.outputs

    def run(self, tensors: dict[str, np.ndarray], state: RunState) -> dict[str, np.ndarray]:
        """The chain's three outputs; the im2col sits in one of ``state``'s buffers (``state.owned``
        says which: give it back when the tensor is dropped)."""
        from cosyedge.engines.kokoro import kernels

        chain = self.chain
        x = tensors[chain.x]
        if x.ndim != 3 or x.shape[0] != 1 or x.dtype != np.float32:
            raise EngineError(f"fused chain input {chain.x!r} has shape {x.shape} {x.dtype}; expected [1, C, T] float32")
        x = np.ascontiguousarray(x[0])
        channels, t_len = x.shape
        if chain.gamma:
            gamma = np.ascontiguousarray(tensors[chain.gamma], np.float32).reshape(-1)
            beta = np.ascontiguousarray(tensors[chain.beta], np.float32).reshape(-1)
        else:
            gamma = beta = chain.alpha  # unused
        weights = chain.alpha  # unused unless the norm is weighted
        if chain.weights:
            weights = state.frame_weights.get(t_len)  # 42 chains share a handful of lengths
            if weights is None:
                weights = state.frame_weights[t_len] = crop_graph.frame_weights(tensors[chain.weights], t_len)
        scales, shifts, mins, maxs = np.empty((4, channels), np.float32)

        def spread(kernel, *args) -> None:
            kernels.spread_channels(self.pool, self.parts, kernel, channels, *args)

        spread(kernels.snake_stats, x, weights, chain.weights is not None, gamma, beta, chain.eps,
               chain.gamma is not None, chain.alpha, chain.inv_alpha, scales, shifts, mins, maxs)
        scale, zero_point = kernels.quant_params(mins, maxs)
        t_out = t_len + chain.pad_lo + chain.pad_hi - chain.dilation * (chain.taps - 1)
        col, col_raw = state.buffers.take("im2col", (chain.taps * channels, t_out), np.int8)
        spread(kernels.snake_quantize_im2col, x, scales, shifts, chain.alpha, chain.inv_alpha, scale, zero_point,
               chain.pad_lo, chain.pad_hi, chain.taps, chain.dilation, col)
        state.largest = max(state.largest, col.nbytes)
        state.owned[chain.col] = ("im2col", col_raw)
        return {chain.col: col[None], chain.scale: np.array(scale, np.float32),
                chain.zero_point: np.full(chain.zero_point_shape, zero_point - 128, np.int8)}


class _HostStep:
    """A node of the ``crop.HOST_DOMAIN`` domain, run in Python (``crop.CropInputs``/``CropOutput``)."""

    def __init__(self, node: Any, host: Any) -> None:
        self.nodes = [node]
        self.host = host
        self.inputs = list(host.inputs)
        self.outputs = list(host.outputs)
        if list(node.input) != self.inputs or list(node.output) != self.outputs:
            raise EngineError(f"host step {node.name} does not match its implementation")

    def run(self, tensors: dict[str, np.ndarray], state: "RunState") -> dict[str, np.ndarray]:
        return self.host.run(tensors, state)


def _host_steps(graph: Any, source: Any) -> list[_HostStep]:
    """The crop's host steps in ``graph`` (see crop.prepare_graph)."""
    makers = {"CropInputs": lambda: crop_graph.CropInputs(source), "CropOutput": crop_graph.CropOutput}
    steps = []
    for node in graph.node:
        if node.domain == crop_graph.HOST_DOMAIN:
            if node.op_type not in makers:
                raise EngineError(f"unknown host step {node.op_type}")
            steps.append(_HostStep(node, makers[node.op_type]()))
    return steps


def _elem_types(model: Any) -> dict[str, int]:
    """Element type of every tensor (onnx shape inference; MatMulIntegerToFloat gives float)."""
    from onnx import TensorProto, helper, shape_inference

    # On a copy without the weights' data (their types and shapes suffice): inferring on the full
    # model copies 90 MB of weights and left ~110 MB of heap behind (measured).
    source = model.graph
    stub = helper.make_graph(
        source.node, source.name,
        [*source.input, *(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in source.initializer)],
        source.output, value_info=source.value_info)
    inferred = shape_inference.infer_shapes(
        helper.make_model(stub, opset_imports=list(model.opset_import), ir_version=model.ir_version), strict_mode=False)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]
             if v.type.tensor_type.elem_type}
    for node in model.graph.node:
        if node.op_type == "MatMulIntegerToFloat":
            types.setdefault(node.output[0], TensorProto.FLOAT)
    return types


def depth_first_order(graph: Any, units: Sequence[list] = ()) -> list:
    """The graph's nodes in a depth-first topological order: each node right after the nodes it
    needs, found from the graph outputs, inputs in order (nodes no output needs go last, in graph
    order). The vocoder's parallel resblocks (one input, three branches summed) then run branch by
    branch instead of in lockstep, so one branch's tensors are alive at a time rather than all
    three's. Every node still computes the same values from the same inputs.

    Each of ``units`` (node lists in topological order, e.g. a fused pattern with several outputs)
    is placed as one block: all its nodes at once, after everything any of them needs from
    outside, so no reader of one of its outputs comes before the whole unit."""
    items: dict[int, list] = {id(node): unit for unit in units for node in unit}
    for node in graph.node:
        items.setdefault(id(node), [node])
    producer = {out: items[id(node)] for node in graph.node for out in node.output if out}

    def needs(item: list) -> list[str]:
        made = {out for node in item for out in node.output}
        return [name for node in item for name in node.input if name and name not in made]

    placed: set[int] = set()
    order: list = []
    for name in [o.name for o in graph.output]:
        root = producer.get(name)
        if root is None or id(root) in placed:
            continue
        stack = [(root, needs(root), 0)]
        while stack:
            item, inputs, k = stack.pop()
            if k < len(inputs):
                stack.append((item, inputs, k + 1))
                dep = producer.get(inputs[k])
                if dep is not None and id(dep) not in placed and all(i is not dep for i, _, _ in stack):
                    stack.append((dep, needs(dep), 0))
                continue
            placed.add(id(item))
            order.extend(item)
    done = {id(node) for node in order}
    order += [node for node in graph.node if id(node) not in done]
    return order


NUMBA_CACHE_NAME = "numba-cache"  # in the model directory, when the package directory is read-only


def _writable_dir(path: Path) -> bool:
    """Whether ``path`` exists or can be made, and a file can be written in it (numba's own test)."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def keep_kernel_cache_local(model_dir: Path, package_cache: Path | None = None) -> None:
    """Where numba caches the compiled kernels: in numba's own first choice, the ``__pycache__``
    next to kernels.py (``package_cache``, given by tests), when it is writable (a checkout), else
    ``<model_dir>/numba-cache`` rather than numba's fallback under ``~/.cache`` (an install owned
    by another user). Left alone when NUMBA_CACHE_DIR is set, or when neither directory is
    writable (numba then uses its user-wide cache). Call before the first import of ``kernels``:
    numba picks the location when a cached function is defined."""
    import numba

    if package_cache is None:
        package_cache = Path(__file__).resolve().parent / "__pycache__"
    if numba.config.CACHE_DIR or _writable_dir(package_cache):
        return
    local = Path(model_dir) / NUMBA_CACHE_NAME
    if _writable_dir(local):
        numba.config.CACHE_DIR = str(local)
        logger.info("package directory is read-only: numba caches the kernels in %s", local)
    else:
        logger.warning("neither the package directory nor %s is writable: numba uses its user-wide cache",
                       local)


class FusedSession:
    """The runtime graph as segments + fused chains; ``run(None, feeds)`` like an InferenceSession.

    ``chains="numba"`` runs the chains on ``kernels`` and the ``fused_ops`` patterns of ``ops`` on their
    steps; ``"ort"`` runs all of them as onnxruntime segments of their own nodes (exact).
    ``crop=True`` runs the vocoder on a cropped input (crop.py): less edge silence rendered, the
    output cut to speech + margins, and a second output ``crop.OFFSET_OUTPUT`` (its sample offset
    in the uncropped audio).
    """

    #: One call at 2 threads keeps both cores busy (1.8x over 1 thread on the levers input), so the
    #: engine runs one model call at a time on it (``KokoroEngine.load``), not a second one beside it.
    keeps_cores_busy = True

    def __init__(self, onnx_path: Path, threads: int, chains: str = "numba", keep_bytes: int = KEEP_BYTES,
                 ops: Sequence[str] = fused_ops.KINDS, crop: bool = False) -> None:
        import onnx
        import onnxruntime as ort

        if chains not in ("numba", "ort"):
            raise ValueError(f"chains must be 'numba' or 'ort', not {chains!r}")
        start = time.perf_counter()
        model = onnx.load(str(onnx_path))
        graph = model.graph
        source = None
        if crop:
            source = crop_graph.prepare_graph(model, weight_instance_norms=chains == "ort")
        found = find_chains(graph)
        if not found:
            raise EngineError(f"{Path(onnx_path).name} has no fusable conv-input chains")
        if crop and chains == "numba":
            crop_graph.mark_weighted_chains(found)
        hosts = _host_steps(graph, source)
        self.crop = crop
        self._cut_flag = crop_graph.CUT_SPEECH if crop else None  # CropOutput's cut-speech flag
        taken = {id(node) for unit in [*found, *hosts] for node in unit.nodes}
        others = []  # fused_ops patterns (STFT, bias + residual): fused too, or left in the segments if absent
        for pattern in fused_ops.find_patterns(graph, ops):
            if any(id(node) in taken for node in pattern.nodes):  # a node is claimed once, chains first
                logger.debug("%s overlaps another fused step; left in onnxruntime", type(pattern).__name__)
                continue
            taken.update(id(node) for node in pattern.nodes)
            others.append(pattern)
        types = _elem_types(model)
        register_shared_arena()
        self.threads = max(1, int(threads))
        self.buffers = Buffers()
        self.keep_bytes = int(keep_bytes)
        self.shrink_options = ort.RunOptions()  # frees the arena's unused regions when the run ends
        self.shrink_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="kokoro-chain") \
            if self.threads > 1 and chains == "numba" else None
        if chains == "numba":
            keep_kernel_cache_local(Path(onnx_path).parent)
            from cosyedge.engines.kokoro import kernels

            self.compile_s = kernels.compile_kernels()
        else:
            self.compile_s = 0.0

        # The steps in graph order, except that a chain runs just before the first node that reads
        # its outputs (all its inputs exist by then): its im2col then lives as briefly as possible,
        # so one call holds one at a time. Other nodes are grouped into segments.
        patterns: list[Any] = [*found, *others, *hosts]
        owner = {id(node): chain for chain in patterns for node in chain.nodes}
        remaining = {id(chain): len(chain.nodes) for chain in patterns}
        ready: dict[str, Any] = {}  # output name -> pattern whose nodes have all been passed
        groups: list[Any] = []  # node lists (segments) and patterns
        for node in depth_first_order(graph, [p.nodes for p in [*others, *hosts]]):
            for name in node.input:  # a pattern whose outputs this node (or its own pattern) reads
                if name in ready:
                    due = ready[name]
                    for out in due.outputs:
                        ready.pop(out, None)
                    groups.append(due)
            chain = owner.get(id(node))
            if chain is not None:
                remaining[id(chain)] -= 1
                if not remaining[id(chain)]:
                    ready.update(dict.fromkeys(chain.outputs, chain))
                continue
            if not groups or not isinstance(groups[-1], list):
                groups.append([])
            groups[-1].append(node)
        groups += list({id(c): c for c in ready.values()}.values())  # chains read only as graph outputs
        graph_inputs = [i.name for i in graph.input]
        graph_outputs = [o.name for o in graph.output]
        inits = {t.name: t for t in graph.initializer}
        needs: list[list[str]] = []
        makes: list[list[str]] = []
        for group in groups:
            nodes = group if isinstance(group, list) else group.nodes
            made = {out for node in nodes for out in node.output if out}
            used = {name for node in nodes for name in node.input if name}
            needs.append(sorted(name for name in used - made if name not in inits))
            makes.append(sorted(made))
        later: set[str] = set(graph_outputs)
        wanted: list[list[str]] = [[] for _ in groups]
        for i in range(len(groups) - 1, -1, -1):  # outputs a step must hand on = read later
            wanted[i] = [name for name in makes[i] if name in later]
            later |= set(needs[i])
        self.steps: list[Any] = []  # Segment, _Kernel, fused_ops and crop host steps
        for i, group in enumerate(groups):
            if isinstance(group, _HostStep):
                self.steps.append(group)
                continue
            if isinstance(group, Chain) and chains == "numba":
                self.steps.append(_Kernel(group, self._pool, self.threads))
                continue
            if not isinstance(group, list) and chains == "numba":
                self.steps.append(fused_ops.make_step(group, self._pool, self.threads))
                continue
            nodes = group if isinstance(group, list) else group.nodes
            self.steps.append(self._segment(model, nodes, needs[i], wanted[i], types, inits, threads, ort))
        for chain in patterns:  # a kept NodeProto would keep the whole parsed model (~150 MB) alive
            chain.nodes = []
        # Liveness: after step i, drop what no later step reads (graph outputs stay).
        last_use: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for name in step.inputs:
                last_use[name] = i
        self._drop_after: list[list[str]] = [[] for _ in self.steps]
        for name, i in last_use.items():
            if name not in graph_outputs:
                self._drop_after[i].append(name)
        self.input_names = graph_inputs
        self.output_names = graph_outputs
        self.chains = len(found)
        self.fused_ops = [type(p).__name__ for p in others]
        self.segments = sum(isinstance(s, Segment) for s in self.steps)
        self._last_segment = max((i for i, step in enumerate(self.steps) if isinstance(step, Segment)), default=-1)
        # Drop every reference into the parsed model (a NodeProto keeps all of it alive), then
        # return the freed heap: building the segments parses and copies the weights a few times,
        # which left ~70 MB of freed but held heap (measured).
        del model, graph, inits, groups, owner, ready, nodes, group, node, patterns, others, taken
        trim_heap()
        self.load_s = time.perf_counter() - start
        logger.info("fused Kokoro runtime: %d chains + %s (%s), %d onnxruntime segments%s, loaded in %.2f s "
                    "(kernels %.2f s)", self.chains,
                    ", ".join(f"{n} {kind}" for kind, n in Counter(self.fused_ops).items()) or "no other ops", chains,
                    self.segments, ", generator input crop" if crop else "", self.load_s, self.compile_s)

    @staticmethod
    def _segment(model: Any, nodes: list, inputs: list[str], outputs: list[str], types: dict[str, int],
                 inits: dict, threads: int, ort: Any) -> Segment:
        from onnx import helper

        used = {name for node in nodes for name in node.input if name in inits}
        missing = [name for name in [*inputs, *outputs] if name not in types]
        if missing:
            raise EngineError(f"no element type known for {missing[:3]}")
        graph = helper.make_graph(
            nodes, "segment",
            [helper.make_tensor_value_info(name, types[name], None) for name in inputs],
            [helper.make_tensor_value_info(name, types[name], None) for name in outputs],
            [inits[name] for name in sorted(used)])
        sub = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        session = ort.InferenceSession(sub.SerializeToString(), segment_session_options(threads),
                                       providers=["CPUExecutionProvider"])
        return Segment(session, inputs, outputs)

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run all steps in order on ``feeds``; return the requested graph outputs (all if None).
        With the crop, a call whose audio is loud at a cut edge is rendered again whole."""
        outputs, cut_speech = self._run_steps(output_names, feeds)
        if cut_speech:
            logger.info("generator input crop: speech reaches a cut edge; rendering this call whole")
            outputs, _ = self._run_steps(output_names, {**feeds, crop_graph.WHOLE: np.array(True)})
        return outputs

    def _run_steps(self, output_names: Sequence[str] | None,
                   feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], bool]:
        """One pass over the steps: the requested outputs, and the crop's cut-speech flag (False
        without the crop)."""
        tensors = dict(feeds)
        state = RunState(self.buffers)
        try:
            for i, (step, drop) in enumerate(zip(self.steps, self._drop_after)):
                if i == self._last_segment and state.largest > self.keep_bytes:
                    state.run_options = self.shrink_options  # a long call: shrink the arena after its last segment
                tensors.update(step.run(tensors, state))
                for name in drop:
                    tensors.pop(name, None)
                    if name in state.owned:
                        state.buffers.give(*state.owned.pop(name))
            cut_speech = self._cut_flag is not None and bool(tensors.get(self._cut_flag, False))
            return [tensors[name] for name in (output_names or self.output_names)], cut_speech
        finally:
            tensors.clear()
            for role, raw in state.owned.values():  # after a failed step: free to reuse
                state.buffers.give(role, raw)
            if state.largest > self.keep_bytes:
                dropped = state.buffers.release_above(self.keep_bytes)
                logger.debug("long call: dropped %.0f MB of kernel buffers", dropped / 2 ** 20)

    def close(self) -> None:
        """Stop the chain thread pool (sessions are freed with the object)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self.buffers.clear()
