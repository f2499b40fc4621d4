"""The learner that ``bench_gpu_feed.py`` feeds: a Nature-CNN double-DQN update, eager or as one CUDA graph.

One update: Q(obs) of the online network (with gradients), the online network's greedy action on
next_obs and the target network's value of it (no gradients), a Huber loss against ``reward + discount *
that value``, backward, and an Adam step (Dopamine's and CleanRL's settings). ``eager`` is plain PyTorch,
launch-bound on the host at Atari sizes (~300 updates/s on an H200 in the GPU-feed measurements);
``graph`` captures the whole update once in a ``torch.cuda.CUDAGraph`` (Adam with ``capturable=True``)
and replays it after copying each batch into static input tensors, what ``torch.compile`` or a JAX
learner gives (~1,500/s): the hardest learner to keep fed.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional

ACTIONS = 18  # the full Atari action set: the widest head


class NatureCNN(nn.Module):
    """Mnih et al. (2015): three convolutions and two linear layers over a stack of 84x84 frames."""

    def __init__(self, stack_size: int, actions: int = ACTIONS) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(stack_size, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, actions),
        )  # fmt: skip

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.body(frames.float() / 255.0)


class DqnLearner:
    """``update(obs, action, reward, next_obs, discount)``, tensors on ``device`` (obs uint8 (B, stack,
    84, 84), action int64, reward and discount float32)."""

    def __init__(self, device: torch.device, *, batch_size: int, stack_size: int = 4, mode: str = "eager",
                 seed: int = 0) -> None:
        if mode not in ("eager", "graph"):
            raise ValueError(f"mode is {mode!r}; expected 'eager' or 'graph'")
        torch.manual_seed(seed)
        self.device = device
        self.mode = mode
        self.online = NatureCNN(stack_size).to(device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=6.25e-5, eps=1.5e-4,
                                          capturable=mode == "graph")
        self.graph: torch.cuda.CUDAGraph | None = None
        if mode == "graph":
            self._static = (
                torch.zeros((batch_size, stack_size, 84, 84), dtype=torch.uint8, device=device),
                torch.zeros(batch_size, dtype=torch.int64, device=device),
                torch.zeros(batch_size, dtype=torch.float32, device=device),
                torch.zeros((batch_size, stack_size, 84, 84), dtype=torch.uint8, device=device),
                torch.zeros(batch_size, dtype=torch.float32, device=device),
            )
            self._capture()

    def _loss(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor,
              discount: torch.Tensor) -> torch.Tensor:
        q = self.online(obs).gather(1, action.long()[:, None]).squeeze(1)
        with torch.no_grad():
            greedy = self.online(next_obs).argmax(dim=1, keepdim=True)
            target = reward + discount * self.target(next_obs).gather(1, greedy).squeeze(1)
        return functional.smooth_l1_loss(q, target)

    def _step(self, *batch: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=False)
        self._loss(*batch).backward()
        self.optimizer.step()

    def _capture(self) -> None:
        """Warm up on a side stream (as CUDA graph capture needs), then capture one whole update."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(3):
                self._step(*self._static)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._step(*self._static)

    def update(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor,
               discount: torch.Tensor) -> None:
        if self.graph is None:
            self._step(obs, action, reward, next_obs, discount)
            return
        for static, value in zip(self._static, (obs, action, reward, next_obs, discount)):
            static.copy_(value, non_blocking=True)
        self.graph.replay()
