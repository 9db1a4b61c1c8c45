"""On a CPU, the LM head only at the positions the loss is on: SFT's loss
(`completion_loss`, through `_completion_compute_loss`) and DPO's and KTO's
log-probabilities (`compact_fused_head`). torch and trl are imported inside the functions.
"""

from __future__ import annotations

from typing import Any


def _completion_logits(forward: Any, labels: Any, **inputs: Any) -> tuple[Any, Any, Any]:
    """The float32 logits at the positions whose next-token label is not -100, found with
    `logits_to_keep` so the rest never go through the LM head, and those labels:
    (logits [batch, kept, vocab], labels [batch, kept], the kept positions [kept])."""
    targets = labels[:, 1:]
    keep = (targets != -100).any(dim=0).nonzero().squeeze(-1)
    outputs = forward(**inputs, logits_to_keep=keep, use_cache=False)
    return outputs.logits.float(), targets[:, keep], keep


def completion_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
    """SFT's loss (mean negative log-likelihood of the completion tokens) with the LM head
    applied only at the positions the loss is on. trl's fused head tiles the whole
    sequence in float32 on a CPU, which took two thirds of a Gemma step (a 262k-token
    vocabulary); here the head runs on the completion's few hundred positions."""
    import torch

    logits, picked, _ = _completion_logits(
        model,
        inputs["labels"],
        input_ids=inputs["input_ids"],
        attention_mask=inputs.get("attention_mask"),
    )
    total = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), picked.reshape(-1), ignore_index=-100, reduction="sum"
    )
    count = (picked != -100).sum() if num_items_in_batch is None else num_items_in_batch
    return total / torch.as_tensor(count).clamp(min=1)


def compact_fused_head(model: Any) -> None:
    """On a CPU, make the fused LM head that trl's DPO and KTO trainers add to `model` (its
    `model(..., labels=..., fused_lm_head=True)` gives per-token log-probabilities) project
    only the positions with a label, as it does on a GPU. On a CPU trl projects every
    position of the sequence, the prompt's two thousand included. Call it after the
    trainer is made, on the model trl patched (the base model under the adapter)."""
    import types

    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    fused = model.forward
    original = types.MethodType(type(model).forward, model)

    def forward(
        self: Any,
        *args: Any,
        fused_lm_head: bool = False,
        labels: Any = None,
        shift_labels: Any = None,
        num_items_in_batch: Any = None,
        **kwargs: Any,
    ) -> Any:
        if (
            args
            or not fused_lm_head
            or labels is None
            or shift_labels is not None
            or kwargs.get("output_router_logits")
        ):
            return fused(
                *args,
                fused_lm_head=fused_lm_head,
                labels=labels,
                shift_labels=shift_labels,
                num_items_in_batch=num_items_in_batch,
                **kwargs,
            )
        kwargs.pop("use_cache", None)
        logits, picked, keep = _completion_logits(original, labels, **kwargs)
        mask = labels[:, 1:] != -100
        log_softmax = torch.log_softmax(logits, dim=-1)
        target = picked.clamp(min=0).unsqueeze(-1)

        def spread(values: Any) -> Any:
            return values.new_zeros(mask.shape).index_copy(1, keep, values).masked_fill(~mask, 0)

        log_probs = spread(log_softmax.gather(-1, target).squeeze(-1))
        with torch.no_grad():
            entropy = spread(-(log_softmax.exp() * log_softmax).sum(-1))
            mean_logits = spread(logits.mean(-1))
            is_top1 = spread((logits.argmax(-1, keepdim=True) == target).squeeze(-1).float()).bool()
            log_sum_sq_probs = spread(torch.logsumexp(2 * log_softmax, dim=-1))
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(
            loss=-log_probs.sum() / count,
            log_probs=log_probs,
            entropy=entropy,
            log_sum_sq_probs=log_sum_sq_probs,
            mean_logits=mean_logits,
            is_top1=is_top1,
            label_mask=mask,
        )

    model.forward = types.MethodType(forward, model)


def _completion_compute_loss(
    self: Any,
    model: Any,
    inputs: dict[str, Any],
    return_outputs: bool = False,
    num_items_in_batch: Any = None,
) -> Any:
    """`compute_loss` for an SFT trainer on a CPU (see `completion_loss`); it counts the
    tokens trained on as trl does (the progress events' tokens/s)."""
    loss = completion_loss(model, inputs, num_items_in_batch)
    if model.training:
        mask = inputs.get("attention_mask")
        seen = int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
        self._total_train_tokens += seen
        self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
    return (loss, None) if return_outputs else loss
