"""Adafactor with fewer passes over each variable than mesh-tensorflow's.

`FewPassAdafactor` is mesh-tensorflow's `AdafactorOptimizer` (same slots, same names,
same arithmetic up to float rounding) with its update re-cut for CPUs, where a step's
element-wise work takes cores from the matmuls. mesh-tensorflow's makes about thirteen
full-size passes over each variable: squares written out and then reduced, the clipped
update scaled twice, then subtracted into a new buffer. Here:

- a sum of squares (the parameter scale, the update's RMS for clipping) is one
  `L2Loss` kernel that reads its input once;
- a factored second moment's sum over a variable's leading axis is a matmul with a
  row of ones, which reads the squared gradient faster than TensorFlow's reduction over
  a leading axis;
- the clipping and the parameter scale become one scalar, and the variable is updated
  in place by `ResourceApplyGradientDescent` with it, once the step's every gradient is
  computed (the backward pass reads kernels again).

`bench/adafactor.py` times both updates at a T5 shape's weights.

Momentum (beta1), no clipping and stacked dimensions keep mesh-tensorflow's own update.
"""

from __future__ import annotations

from collections.abc import Callable

from t2tcli.compat import tf

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf


class _SliceReduction(mtf.Operation):
    """A sum over some of x's dimensions, computed on each slice by `slice_fn`.

    Where the mesh splits a summed dimension, the slices' partial sums are summed
    across the mesh, as mesh-tensorflow's own reductions do.
    """

    def __init__(self, x: mtf.Tensor, output_shape: mtf.Shape, slice_fn: Callable[[tf.Tensor], tf.Tensor], name: str):
        super().__init__([x], name=name)
        kept = [d for d in x.shape.dims if d in output_shape.dims]
        if kept != output_shape.dims:
            raise ValueError(f"{name}: output dims {output_shape} must keep the order of {x.shape}")
        self._slice_fn = slice_fn
        self._outputs = [mtf.Tensor(self, output_shape, x.dtype)]

    def gradient(self, grad_ys):
        raise ValueError(f"{self.name} is part of an optimizer's update and has no gradient")

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        x = self.inputs[0]
        layout = mesh_impl.tensor_layout(x)
        summed_mesh_axes = [
            layout[i]
            for i, d in enumerate(x.shape.dims)
            if d not in self.outputs[0].shape.dims and layout[i] is not None
        ]
        y = mesh_impl.slicewise(self._slice_fn, lowering.tensors[x])
        if summed_mesh_axes:
            y = mesh_impl.allreduce(y, summed_mesh_axes, "SUM")
        lowering.set_tensor_lowering(self.outputs[0], y)


def sum_of_squares(x: mtf.Tensor) -> mtf.Tensor:
    """sum(x**2) as a scalar, reading x once."""
    return _SliceReduction(x, mtf.Shape([]), lambda s: 2.0 * tf.nn.l2_loss(s), "sum_of_squares").outputs[0]


def _sum_leading_axis(s: tf.Tensor) -> tf.Tensor:
    rows = s.shape[0]
    return tf.reshape(tf.matmul(tf.ones([1, rows], s.dtype), tf.reshape(s, [rows, -1])), s.shape[1:])


def sum_over(x: mtf.Tensor, dim: mtf.Dimension) -> mtf.Tensor:
    """x summed over `dim`; over a leading dimension, as a matmul with ones."""
    if x.shape.dims[0] != dim:
        return mtf.reduce_sum(x, reduced_dim=dim)
    return _SliceReduction(x, x.shape - dim, _sum_leading_axis, "sum_leading").outputs[0]


class _ScaledAssignSub(mtf.Assign):
    """var -= scale * delta, in place on each slice, with `scale` a scalar Tensor.

    An `mtf.Assign` of one variable, so that mesh-tensorflow's variable stacking (which
    stacks only variables set by the same Assign operations, and rewrites those
    operations' inputs) leaves the variable and this update alone. `scale` is kept
    beside the inputs for that reason; it is made before this operation, so it is
    lowered first.
    """

    def __init__(self, var: mtf.Variable, delta: mtf.Tensor, scale: mtf.Tensor, after: list[mtf.Tensor]):
        super().__init__([var], [delta], name="scaled_assign_sub")
        self._scale = scale
        self._after = after

    def lower(self, lowering):
        deltas = lowering.tensors[self.inputs[0]].to_laid_out_tensor().all_slices
        scales = lowering.tensors[self._scale].to_laid_out_tensor().all_slices

        def assign_fn(variable, slice_var, delta_and_scale):
            delta, scale = delta_and_scale
            # A resource variable of delta's dtype (not TPU's replicated ones): updated in place,
            # under the variable's exclusive lock as an assignment is. Without it, a read that
            # overlaps the update can see half of it: runs with one seed then differ.
            if isinstance(slice_var, tf.Variable) and hasattr(slice_var, "handle") and slice_var.dtype == delta.dtype:
                return tf.raw_ops.ResourceApplyGradientDescent(
                    var=slice_var.handle, alpha=scale, delta=delta, use_locking=True
                )
            return mtf.assign_sub_slice(variable, slice_var, delta * scale)

        with tf.control_dependencies(_all_done(lowering, self._after)):
            lowering.operations[self] = lowering.variables[self.variables[0]].assign_to_slices(
                assign_fn, list(zip(deltas, scales, strict=True))
            )


def _all_done(lowering: mtf.Lowering, tensors: list[mtf.Tensor]) -> list[tf.Operation]:
    """One op that runs once every slice of `tensors` is computed, made once per lowering.

    The in-place updates wait for it, given the step's gradients: the backward pass reads
    a kernel again for its input's gradient (TensorFlow reads a resource variable where it
    is used), and an update that ran first would change what that read sees, so runs with
    one seed would differ. mesh-tensorflow's grouped assignment waits for every gradient
    the same way.
    """
    if not tensors:
        return []
    done = getattr(lowering, "_t2tcli_gradients_done", None)
    if done is None:
        slices = [s for t in tensors for s in lowering.tensors[t].to_laid_out_tensor().all_slices]
        done = tf.group(*slices, name="gradients_done")
        lowering._t2tcli_gradients_done = done
    return [done]


class FewPassAdafactor(mtf.optimize.AdafactorOptimizer):
    """mesh-tensorflow's Adafactor, whose update reads and writes each variable fewer times."""

    def apply_grads(self, grads: list[mtf.Tensor | None], variables: list[mtf.Variable]) -> list[mtf.Operation]:
        """Like mesh-tensorflow's, but each in-place update stays an operation of its own,
        run once every gradient of the step is computed."""
        self._gradients = [grad for grad in grads if grad is not None]
        ops = [op for grad, var in zip(grads, variables, strict=True) for op in self.apply_grad(grad, var)]
        in_place = [op for op in ops if isinstance(op, _ScaledAssignSub)]
        assigns = [op for op in ops if not isinstance(op, _ScaledAssignSub)]
        if assigns:
            assigns = variables[0].graph.combine_assignments(assigns)
        return assigns + in_place

    def apply_grad(self, grad: mtf.Tensor | None, var: mtf.Variable) -> list[mtf.Operation]:
        if grad is None or self._beta1 or self._clipping_threshold is None or self._stacked_dim_names:
            return super().apply_grad(grad, var)
        grad = mtf.to_float(grad)
        factored_dims = self._factored_dims(var.shape)
        # Slots are made outside the update's variable scope, where mesh-tensorflow makes them.
        if factored_dims:
            d0, d1 = factored_dims
            vr = _slot(var, "vr", var.shape - d0)
            vc = _slot(var, "vc", var.shape - d1)
        else:
            v = _slot(var, "v", var.shape)
        decay_rate = self._decay_rate
        mixing_rate = 1.0 - decay_rate
        with tf.compat.v1.variable_scope(var.name + "/adafactor"):
            grad_squared = mtf.square(grad)
            if factored_dims:
                row_mean = sum_over(grad_squared, d0) * (1.0 / d0.size) + self._epsilon1
                col_mean = sum_over(grad_squared, d1) * (1.0 / d1.size) + self._epsilon1
                new_vr = vr * decay_rate + row_mean * mixing_rate
                new_vc = vc * decay_rate + col_mean * mixing_rate
                updates = [mtf.assign(vr, new_vr), mtf.assign(vc, new_vc)]
                long_term_mean = mtf.reduce_mean(new_vr, reduced_dim=d1)
                x = grad * mtf.rsqrt(new_vr / long_term_mean) * mtf.rsqrt(new_vc)
            else:
                new_v = v * decay_rate + (grad_squared + self._epsilon1) * mixing_rate
                updates = [mtf.assign(v, new_v)]
                x = grad * mtf.rsqrt(new_v)
            per_value = 1.0 / var.shape.size
            update_rms = mtf.sqrt(sum_of_squares(x) * per_value)
            scale = mtf.reciprocal(mtf.maximum(1.0, update_rms * (1.0 / self._clipping_threshold)))
            scale *= self._learning_rate
            if self._multiply_by_parameter_scale and not any(s in var.name for s in self._exclude_from_parameter_scale):
                parameter_rms = mtf.sqrt(sum_of_squares(mtf.to_float(var.value)) * per_value)
                scale *= mtf.maximum(parameter_rms, self._epsilon2)
            updates.append(_ScaledAssignSub(var, x, scale, after=getattr(self, "_gradients", [])))
        return updates


def _slot(var: mtf.Variable, name: str, shape: mtf.Shape) -> mtf.Tensor:
    """A zero-initialised accumulator named as mesh-tensorflow names it, so checkpoints match."""
    return mtf.get_variable(
        var.mesh, f"{var.name}_slot_{name}", shape, initializer=tf.compat.v1.zeros_initializer(), trainable=False
    )
