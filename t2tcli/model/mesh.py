"""Mesh shapes, layouts and devices: validated up front, before any graph is built.

A mesh is a named grid of devices (`model:2,batch:2`); a layout maps tensor dimensions
of the transformer onto mesh dimensions (`batch:batch;d_ff:model;heads:model`). Mistakes
in either only surface deep inside mesh-tensorflow's lowering otherwise, so they are
checked here against the model's known dimensions and the devices that exist, and
reported as one-line errors naming the hparam.

CPU and GPU run through `PlacementMeshImpl` (one TF device per mesh position; on CPU
several logical devices of one process); TPUs through `SimdMeshImpl` under TPUEstimator.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import zlib
from typing import Any

from t2tcli.compat import tf
from t2tcli.errors import UserError, did_you_mean
from t2tcli.hparams import HParams
from t2tcli.model import einsum_order
from t2tcli.model.weight_names import padded_vocab_size

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf

# Tensor dimensions of the Bitransformer that a layout may split.
TENSOR_DIMS = ("batch", "d_ff", "heads", "vocab", "d_model", "length", "memory_length", "kv", "experts", "ensemble")
# Mesh dimension names that default layouts mention; a rule for one of these is ignored
# when the mesh has no such dimension (e.g. the default layout on one device).
CONVENTIONAL_MESH_DIMS = ("batch", "model")
# Most logical CPU devices one process is allowed to split itself into.
MAX_CPU_DEVICES = 64

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """A parsed, validated mesh shape and layout."""

    shape: list[tuple[str, int]]
    layout: list[tuple[str, str]]

    @property
    def size(self) -> int:
        return math.prod(n for _, n in self.shape) if self.shape else 1

    def mtf_shape(self) -> mtf.Shape:
        return mtf.Shape([mtf.Dimension(name, n) for name, n in self.shape])

    def mtf_layout(self) -> mtf.LayoutRules:
        mesh_dims = {name for name, _ in self.shape}
        return mtf.LayoutRules([(t, m) for t, m in self.layout if m in mesh_dims])

    def mesh_size(self, mesh_dim: str) -> int:
        return dict(self.shape).get(mesh_dim, 1)

    def split_of(self, tensor_dim: str) -> int:
        """How many ways the layout splits `tensor_dim` on this mesh (1: not split)."""
        for t, m in self.layout:
            if t == tensor_dim:
                return self.mesh_size(m)
        return 1


def parse_mesh_shape(text: str) -> list[tuple[str, int]]:
    """'model:2,batch:2' -> [('model', 2), ('batch', 2)]; '' -> [] (one device)."""
    out: list[tuple[str, int]] = []
    for piece in [p.strip() for p in (text or "").split(",") if p.strip()]:
        m = re.fullmatch(rf"({_NAME})\s*:\s*(\d+)", piece)
        if not m or int(m.group(2)) < 1:
            raise UserError(f"mesh_shape: '{piece}' is not of the form name:size (e.g. model:2,batch:4)")
        if m.group(1) in dict(out):
            raise UserError(f"mesh_shape: dimension '{m.group(1)}' appears twice in '{text}'")
        out.append((m.group(1), int(m.group(2))))
    return out


def parse_layout(text: str) -> list[tuple[str, str]]:
    """'batch:batch;d_ff:model' -> [('batch', 'batch'), ('d_ff', 'model')]."""
    out: list[tuple[str, str]] = []
    for piece in [p.strip() for p in re.split(r"[;,]", text or "") if p.strip()]:
        m = re.fullmatch(rf"({_NAME})\s*:\s*({_NAME})", piece)
        if not m:
            raise UserError(f"layout: '{piece}' is not of the form tensor_dim:mesh_dim (e.g. d_ff:model)")
        out.append((m.group(1), m.group(2)))
    return out


def spec_from_hparams(hp: HParams) -> MeshSpec:
    """Parses and checks `hp.mesh_shape` / `hp.layout` against the model's dimensions."""
    shape = parse_mesh_shape(hp.mesh_shape)
    layout = parse_layout(hp.layout)
    mesh_dims = [name for name, _ in shape]
    seen: set[str] = set()
    for tensor_dim, mesh_dim in layout:
        if tensor_dim not in TENSOR_DIMS:
            raise UserError(
                f"layout: unknown tensor dimension '{tensor_dim}'{did_you_mean(tensor_dim, TENSOR_DIMS)} "
                f"(known: {', '.join(TENSOR_DIMS)})"
            )
        if mesh_dim not in mesh_dims and mesh_dim not in CONVENTIONAL_MESH_DIMS:
            raise UserError(
                f"layout: '{tensor_dim}:{mesh_dim}' names mesh dimension '{mesh_dim}', which mesh_shape "
                f"'{hp.mesh_shape}' does not have{did_you_mean(mesh_dim, mesh_dims)}"
            )
        if tensor_dim in seen:
            raise UserError(f"layout: tensor dimension '{tensor_dim}' is mapped twice")
        seen.add(tensor_dim)
    spec = MeshSpec(shape=shape, layout=layout)
    sizes = {"d_ff": hp.d_ff, "heads": hp.num_heads, "d_model": hp.d_model, "kv": hp.d_kv}
    for tensor_dim, size in sizes.items():
        ways = spec.split_of(tensor_dim)
        if size % ways:
            raise UserError(f"layout splits {tensor_dim}={size} {ways} ways, which does not divide it")
    return spec


def check_batch(spec: MeshSpec, batch_size: int) -> None:
    """The batch dimension must divide evenly over the mesh dimension it is laid out on."""
    ways = spec.split_of("batch")
    if batch_size % ways:
        raise UserError(f"batch of {batch_size} sequences does not split {ways} ways over mesh_shape")


def check_vocab(spec: MeshSpec, vocab_size: int, vocab_divisor: int) -> None:
    padded = padded_vocab_size(vocab_size, vocab_divisor)
    ways = spec.split_of("vocab")
    if padded % ways:
        raise UserError(f"layout splits vocab={padded} {ways} ways, which does not divide it")


def num_gpus() -> int:
    return len(tf.config.list_physical_devices("GPU"))


def placement_devices(spec: MeshSpec, use_gpu: bool | None = None) -> list[str]:
    """One TF device per mesh position: GPUs when present, else logical CPUs.

    On CPU the Estimator's session is configured with `cpu_device_count(spec)` logical
    devices, so model and data parallelism can be exercised on one machine.
    """
    n = spec.size
    gpus = num_gpus() if use_gpu is None or use_gpu else 0
    if use_gpu and not gpus:
        raise UserError("a GPU was requested but TensorFlow sees none")
    if gpus:
        if n > gpus:
            raise UserError(f"mesh_shape needs {n} devices but only {gpus} GPU(s) are visible")
        return [f"/device:GPU:{i}" for i in range(n)]
    if n > MAX_CPU_DEVICES:
        raise UserError(f"mesh_shape needs {n} devices; at most {MAX_CPU_DEVICES} logical CPU devices are supported")
    return [f"/device:CPU:{i}" for i in range(n)] if n > 1 else [""]


def cpu_device_count(spec: MeshSpec) -> int:
    return spec.size if not num_gpus() else 1


def tpu_cores(topology: str) -> int:
    """Cores of a TPU topology written as '2x2' (v2/v3: 2 cores a chip) or 'v3-32' / 'v2-8'."""
    m = re.fullmatch(r"v\d+[a-z]*-(\d+)", topology or "")
    if m:
        return int(m.group(1))
    dims = [d for d in (topology or "").split("x") if d]
    if not dims or not all(d.isdigit() for d in dims):
        raise UserError(f"--tpu_topology: '{topology}' is not like 2x2, 4x4 or v3-32")
    return 2 * math.prod(int(d) for d in dims)


def check_tpu(spec: MeshSpec, topology: str) -> None:
    cores = tpu_cores(topology)
    if spec.size != cores:
        raise UserError(f"mesh_shape has {spec.size} positions but --tpu_topology={topology} has {cores} cores")


class PlacementMeshImpl(mtf.placement_mesh_impl.PlacementMeshImpl):
    """mesh-tensorflow's CPU / GPU mesh, computing bfloat16 einsums in float32 where asked,
    and two-operand einsums in the operand order their result comes out in
    (t2tcli.model.einsum_order).

    TensorFlow's bfloat16 Einsum kernel is far slower than float32's on CPUs without
    native bfloat16 (see t2tcli.model.kernel_layout); float32 inputs, einsum and a rounding of the
    result to bfloat16 give what a native kernel gives (float32 accumulation), at
    float32's speed plus two casts.
    """

    def __init__(self, shape: mtf.Shape, layout: mtf.LayoutRules, devices: list[str], float32_einsums: bool) -> None:
        super().__init__(shape, layout, devices)
        self.float32_einsums = float32_einsums
        self._seeds_for: tf.Graph | None = None  # the graph _seeds was seeded for
        self._seeds: random.Random | None = None

    def random(self, shape: mtf.Shape, tf_fn: Any, kwargs: dict) -> Any:
        """A random op (dropout's mask), its slices seeded from the graph's seed.

        mesh-tensorflow seeds each one from Python's unseeded `random` and a string hash
        that changes from process to process, so runs with one --random_seed and dropout
        differed. Here the ops draw their seeds in the order the graph makes them from a
        generator seeded with the graph's seed (unseeded without one, as before); slices
        at the same offset still get the same seed, so replicated slices agree.
        """
        graph = tf.compat.v1.get_default_graph()
        if self._seeds_for is not graph:
            self._seeds_for, self._seeds = graph, random.Random(graph.seed)
        op_seed = self._seeds.getrandbits(31)
        slice_shape = self.slice_shape(shape)

        def one_slice(pnum: int) -> tf.Tensor:
            begin = self.slice_begin(shape, pnum)
            seed = zlib.crc32(f"{op_seed},{begin}".encode()) & 0x7FFFFFFF
            return tf_fn(slice_shape, seed=seed, **kwargs)

        return self.slicewise(one_slice, self.laid_out_pnum())

    def einsum(self, equation: str, *slices: tf.Tensor) -> tf.Tensor:
        if self.float32_einsums and slices[0].dtype == tf.bfloat16:
            return tf.cast(einsum_order.einsum(equation, *(tf.cast(s, tf.float32) for s in slices)), tf.bfloat16)
        return einsum_order.einsum(equation, *slices)
