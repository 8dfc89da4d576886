"""The training machinery the offline CLIP models share (``mlc-easyvqa-tiny`` in
:mod:`.train_clip`, ``mlc-scenes-tiny`` in :mod:`.train_scenes_clip`): the optimizer
and its schedule, the step loop, and saving the checkpoint with its training report.

What a model learns (its data, batches and loss) stays in its own module and reaches
the loop as one callable per step, so the two trainers cannot drift apart in how they
step, clamp the logit scale or report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np



def optimizer(model: Any, lr: float, steps: int) -> tuple[Any, Callable[[int], float]]:
    """AdamW (weight decay on matrices only) and its schedule: linear warm-up over 5 %
    of the steps, then cosine decay to 0."""
    import torch

    params_decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
    params_rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
    opt = torch.optim.AdamW([{"params": params_decay, "weight_decay": 0.1},
                             {"params": params_rest, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.98), eps=1e-6, fused=True)
    warmup = max(1, steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return lr * (step + 1) / warmup
        return 0.5 * lr * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    return opt, lr_at


def fit(model: Any, batch_loss: Callable[[], Any], *, steps: int, lr: float, desc: str, progress: bool,
        window: int) -> list[float]:
    """Train ``model`` for ``steps`` steps; ``batch_loss()`` draws one batch and returns
    its loss (a tensor). Returns every step's loss; the progress bar shows the mean of
    the last ``window``."""
    import torch

    opt, lr_at = optimizer(model, lr, steps)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc=desc, unit="step")
    losses: list[float] = []
    with torch.enable_grad():
        for step in range(steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = batch_loss()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0, math.log(100))  # CLIP's cap on the temperature
            losses.append(float(loss.detach()))
            if bar is not None:
                bar.update(1)
                if step % window == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-window:]):.3f}")
    if bar is not None:
        bar.close()
    return losses


def save_with_report(model: Any, model_cfg: dict[str, Any], out_dir: Path, report: dict[str, Any],
                     losses: list[float], window: int,
                     evaluate: Optional[Callable[[Path], dict[str, Any]]]) -> dict[str, Any]:
    """Save the trained model (fp16) in the layout :class:`~mlc_integrations.embed.models.ClipSpec`
    loads, complete ``report`` with what every checkpoint states (final loss over the last
    ``window`` steps, size, parameters, config) and the test-split check ``evaluate``
    returns, write it as ``training_report.json`` next to the weights and return it."""
    model.eval()
    save_clip_checkpoint(model, model_cfg, out_dir, half=True)
    report.update({
        "final_loss": round(float(np.mean(losses[-window:])), 4),
        "checkpoint_bytes": (out_dir / "open_clip_model.safetensors").stat().st_size,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "model_cfg": model_cfg,
    })
    if evaluate is not None:
        report["test_split"] = evaluate(out_dir)
    (out_dir / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def save_clip_checkpoint(model: Any, model_cfg: dict[str, Any], directory: str | Path,
                         preprocess_cfg: Optional[dict[str, Any]] = None, half: bool = False) -> Path:
    """Write an open_clip model in the directory layout ``mlc_integrations.ClipSpec`` loads
    (``open_clip_config.json`` + ``open_clip_model.safetensors``). Weights only: no pickle."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = {"model_cfg": model_cfg}
    if preprocess_cfg:
        cfg["preprocess_cfg"] = preprocess_cfg
    (d / "open_clip_config.json").write_text(json.dumps(cfg, indent=2))
    state = {k: (v.half() if half and v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(d / "open_clip_model.safetensors"))
    return d
