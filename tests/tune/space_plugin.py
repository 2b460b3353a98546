"""A search-space module for `kir tune --space-module tests/tune/space_plugin.py:BlockLevels`
(tests/tune/test_tune_space_options.py): Mneme's plugin protocol (dimensions, derived,
constraints, baseline), with one dimension as Mneme writes its params (an object with
low, high, step)."""
from __future__ import annotations


class IntRange:
    """As Mneme's search_space.IntRangeParam: low..high by step, ends included."""

    def __init__(self, low: int, high: int, step: int = 1) -> None:
        self.low, self.high, self.step = low, high, step


class BlockLevels:
    """The block's x among `threads`, the opt level among `levels`, the register cap
    0..128 by 64; a block of more than `max_product` threads x opt level is refused;
    `fail_at`: derived() raises at that many threads (a module's own error)."""

    def __init__(self, record, threads=(64, 128, 256), levels=(1, 2, 3), max_product=512, fail_at=None) -> None:
        self.record, self.fail_at = record, fail_at
        self.threads, self.levels, self.max_product = list(threads), list(levels), max_product

    def dimensions(self):
        return {"threads": self.threads, "level": self.levels, "regs": IntRange(0, 128, 64)}

    def derived(self, params):
        if params["threads"] == self.fail_at:
            raise ValueError(f"no variant for {params['threads']} threads")
        return {"block": [params["threads"], 1, 1], "opt_level": params["level"], "maxrregcount": params["regs"]}

    def constraints(self, params):
        return params["threads"] * params["level"] <= self.max_product

    def baseline(self):
        return {"threads": self.record.launch.block[0], "level": 1}
