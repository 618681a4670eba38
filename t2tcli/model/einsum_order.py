"""Two-operand einsums in the operand order whose result needs no transpose.

TensorFlow's Einsum kernel contracts two operands as one batched matmul whose result
holds the shared (batch) labels first, then the first operand's other kept labels, then
the second's. When the equation asks for its output in another order, the kernel
transposes the whole result afterwards: one more pass over it. The gradients
mesh-tensorflow writes for an einsum often ask for exactly that: a kernel's gradient
`abc,abd->dc`, attention's keys' gradient `abcd,abce->abed`. Given the operands the other
way round, the same kernel's result is already in the asked-for order, and swapping two
inputs costs nothing while saving that pass (`bench/einsum_shapes.py` times a step's
products both ways).

Only equations whose labels each appear once per operand, with every output label in an
input, are considered; anything else is left as written.
"""

from __future__ import annotations

from t2tcli.compat import tf


def _natural_output(left: str, right: str, output: str) -> str | None:
    """The label order TensorFlow's kernel produces for `left,right`, before any transpose.

    None where the equation is outside the simple form this reasons about.
    """
    if "." in left + right + output or any(len(set(s)) != len(s) for s in (left, right, output)):
        return None
    if not set(output) <= set(left) | set(right):
        return None
    batch = [c for c in dict.fromkeys(left + right) if c in left and c in right and c in output]
    left_only = [c for c in left if c in output and c not in right]
    right_only = [c for c in right if c in output and c not in left]
    return "".join(batch + left_only + right_only)


def swapped(equation: str) -> str | None:
    """`equation` with its two operands swapped, where only that order yields the output
    as written; None where the equation is best run as it is (or is not a two-operand one)."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    operands = inputs.split(",")
    if not arrow or len(operands) != 2:
        return None
    left, right = operands
    if _natural_output(left, right, output) == output:
        return None
    if _natural_output(right, left, output) != output:
        return None
    return f"{right},{left}->{output}"


def einsum(equation: str, *operands: tf.Tensor) -> tf.Tensor:
    """tf.einsum, with two operands given to TensorFlow in the order that needs no transpose."""
    other = swapped(equation) if len(operands) == 2 else None
    if other is None:
        return tf.einsum(equation, *operands)
    return tf.einsum(other, *reversed(operands))
