"""A net that grows with the data: continue a run in a larger ``b{blocks}c{channels}``.

KataGo's first run grew its net (b6 -> b10 -> b15 -> b20) as the data allowed: a small net
learns fastest from few games, a large one keeps learning once there are many. Here the
trainer setting ``grow_schedule`` (``"b6c48@100000,b8c64@400000"``: grow to that net once the
data has that many rows) calls :func:`grow_net` between generations, so a run continues in
the larger net without starting over (:func:`trainer.steps.grow_trainer`).

:func:`grow_net` is function-preserving (Net2Net's idea, with zero-initialised residual
branches rather than copied units): the grown net computes exactly what the small one did,
so the first release after a growth plays as the last one before it. How:

- Old weights keep their place: channel k stays channel k, block i stays block i, and in the
  pooled features (``GlobalPool``: mean, scaled mean, max, each C wide) each third keeps its
  old channels at its start.
- New channels and units compute whatever their random weights give, but every weight by
  which an old channel or an output reads them is 0 (the convolutions' and the pooled
  linears' input columns of the new channels, ``value_out``'s columns of the new value
  units), so old channels, and with them the batch statistics of their BatchNorms, are
  unchanged, in training mode too.
- A new residual block adds 0: the BatchNorm closing its branch has weight and bias 0, and the
  block's input is a ReLU output, so ``relu(x + 0) == x``.

Zeroing the readers rather than the new units keeps everything alive: a zero weight reading a
non-zero activation gets a gradient at the first step (a unit zeroed before a ReLU would not:
ReLU's gradient at 0 is 0). tests/test_grow.py checks both properties.
"""

from __future__ import annotations

import re

import torch

from trainer.model import KgrpcNet, head_channels, parse_arch

# Parameters whose input axis is GlobalPool's output (three segments of the pooled width).
_POOLED_INPUT = re.compile(r"(^|\.)(gbias|pass_fc|value_fc|opp_pass_fc)\.weight$")


def parse_schedule(text: str) -> list[tuple[int, int, int]]:
    """``"b6c48@100000,b8c64@400000"`` -> ``[(100000, 6, 48), (400000, 8, 64)]``, checked:
    rows increasing, each net at least as deep and as wide as the one before, and larger."""
    out: list[tuple[int, int, int]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        arch, sep, rows = part.partition("@")
        if not sep or not rows.strip().isdigit():
            raise ValueError(f"grow_schedule {part!r}: expected ARCH@ROWS, e.g. b6c48@100000")
        blocks, channels = parse_arch(arch.strip())
        out.append((int(rows), blocks, channels))
    for (r0, b0, c0), (r1, b1, c1) in zip(out, out[1:], strict=False):
        if r1 <= r0 or b1 < b0 or c1 < c0 or (b1, c1) == (b0, c0):
            raise ValueError(
                f"grow_schedule: b{b1}c{c1}@{r1} does not follow b{b0}c{c0}@{r0} "
                "(rows must increase and each net be larger than the one before)"
            )
    return out


def target_arch(
    schedule: list[tuple[int, int, int]], rows: int, current: tuple[int, int]
) -> tuple[int, int] | None:
    """The net the schedule asks for at ``rows`` data rows, when larger than ``current``."""
    due = [(b, c) for r, b, c in schedule if rows >= r]
    if not due:
        return None
    blocks, channels = due[-1]
    if (blocks, channels) == current or blocks < current[0] or channels < current[1]:
        return None
    return blocks, channels


def _pooled(lo: int, hi: int, width: int) -> torch.Tensor:
    """GlobalPool features of channels ``lo..hi-1`` in a net ``width`` wide (each of its three
    segments)."""
    return torch.cat([torch.arange(lo, hi) + s * width for s in range(3)])


def _old_index(name: str, axis: int, size: int, old: int, new: int) -> torch.Tensor:
    """Indices in the new tensor's ``axis`` where the old tensor's entries go."""
    if axis == 1 and _POOLED_INPUT.search(name) and size == 3 * old:
        return _pooled(0, old, new)
    return torch.arange(size)


@torch.no_grad()
def grow_net(net: KgrpcNet, blocks: int, channels: int, seed: int = 0) -> KgrpcNet:
    """A ``b{blocks}c{channels}`` net computing what ``net`` computes (see the module doc)."""
    if blocks < net.blocks or channels < net.channels:
        raise ValueError(f"cannot grow {net.arch_name} into b{blocks}c{channels}: a net only grows")
    with torch.random.fork_rng(devices=[]):  # the new weights' draws leave training's RNG be
        torch.manual_seed(seed)
        big = KgrpcNet(
            blocks,
            channels,
            num_planes=net.num_planes,
            num_globals=net.num_globals,
            opponent_policy=net.opponent_policy,
        ).to(next(net.parameters()).device)
    head_old, head_new = head_channels(net.channels), head_channels(channels)
    old_state, new_state = net.state_dict(), big.state_dict()
    for name, old in old_state.items():
        new = new_state[name]
        if old.dim() == 0:
            new.copy_(old)
            continue
        index = []
        for axis, size in enumerate(old.shape):
            trunk = name.startswith(("stem", "tower"))
            o, n = (net.channels, channels) if trunk else (head_old, head_new)
            index.append(_old_index(name, axis, size, o, n))
        new[torch.meshgrid(*index, indexing="ij")] = old
    _zero_new_readers(big, net.blocks, net.channels, head_old)
    return big


def _zero_new_readers(big: KgrpcNet, old_blocks: int, old_c: int, old_head: int) -> None:
    c, head = big.channels, head_channels(big.channels)
    trunk_new, head_new = _pooled(old_c, c, c), _pooled(old_head, head, head)
    for i, block in enumerate(big.tower):
        if i >= old_blocks:
            block.bn2.weight.zero_()  # the whole branch adds 0, and learns through this
            block.bn2.bias.zero_()
            continue
        block.conv1.weight[:old_c, old_c:] = 0.0
        block.conv2.weight[:old_c, old_c:] = 0.0
        if block.gbias is not None:
            block.gbias.weight[:old_c, trunk_new] = 0.0
    big.policy_conv.weight[:old_head, old_c:] = 0.0
    big.value_conv.weight[:old_head, old_c:] = 0.0
    readers = [big.policy_out, big.ownership_out]
    pooled_readers = [big.pass_fc]
    if big.opponent_policy:
        readers.append(big.opp_policy_out)
        pooled_readers.append(big.opp_pass_fc)
    for conv in readers:
        conv.weight[:, old_head:] = 0.0
    for fc in pooled_readers:
        fc.weight[:, head_new] = 0.0
    big.value_fc.weight[: 2 * old_head, head_new] = 0.0
    big.value_out.weight[:, 2 * old_head :] = 0.0
