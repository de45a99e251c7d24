"""Losses: cross_entropy's label_smoothing, which the dynamo exporter's SoftmaxCrossEntropyLoss
leaves out (onnxscript's own comment says ONNX has no such input)."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

CROSS_ENTROPY_SMOOTHED = r'''
def cross_entropy_smoothed(x, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    """F.cross_entropy with label_smoothing > 0, as torch computes it: (1 - e) times the NLL of
    the log-softmax plus e / C times the smoothing term (class indices: the log-probabilities'
    weighted sum, ignored targets left out; probabilities: the targets themselves smoothed).
    Without smoothing the op is left to the exporter, which maps it."""
    if label_smoothing == 0.0:
        return NotImplemented
    class_dim = 1 if x.dim() > 1 else 0
    classes = x.shape[class_dim]
    log_p = torch.log_softmax(x, class_dim)
    shape = [1] * x.dim()
    shape[class_dim] = classes
    scaled = log_p * weight.reshape(shape) if weight is not None else log_p
    if target.is_floating_point():  # class probabilities
        smoothed = target * (1.0 - label_smoothing) + label_smoothing / classes
        loss = -(scaled * smoothed).sum(class_dim)
        if reduction == 1:
            return loss.sum() / (x.numel() / classes)
        return loss.sum() if reduction == 2 else loss
    modes = {0: "none", 1: "mean", 2: "sum"}
    nll = torch.nn.functional.nll_loss(log_p, target, weight, ignore_index=ignore_index,
                                       reduction=modes[reduction])
    ignored = target == ignore_index
    smooth = torch.where(ignored, torch.zeros_like(log_p.select(class_dim, 0)), -scaled.sum(class_dim))
    if reduction == 1:
        kept = (~ignored).to(x.dtype)
        if weight is not None:
            kept = kept * weight[torch.where(ignored, torch.zeros_like(target), target)]
        smooth = smooth.sum() / kept.sum()
    elif reduction == 2:
        smooth = smooth.sum()
    return (1.0 - label_smoothing) * nll + smooth * (label_smoothing / classes)
'''

REWRITES = (
    Rewrite(
        op="aten::cross_entropy_loss",
        family="losses",
        targets=("aten.cross_entropy_loss.default",),
        function="cross_entropy_smoothed",
        source=CROSS_ENTROPY_SMOOTHED,
        exactness=Exactness.ROUNDING,
        error="torch's own formula in another summation order",
        limits="only calls with label_smoothing > 0 (the others export as they are)",
        mismatch_only=True,
    ),
)
