"""The runtime's own logic: broadcasting and the layouts kernels index by."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from emit.runtime import RANK, broadcast, layout, row_layout  # noqa: E402

shapes = st.lists(st.lists(st.sampled_from([0, 1, 2, 3]), max_size=5).map(tuple), min_size=1, max_size=4)


@given(shapes)
@settings(max_examples=300, deadline=None)
def test_broadcast_follows_torch(drawn):
    try:
        expected = torch.broadcast_shapes(*drawn)
    except RuntimeError:
        with pytest.raises(ValueError):
            broadcast(drawn)
        return
    assert broadcast(drawn) == expected


@given(st.lists(st.integers(1, 4), min_size=0, max_size=6), st.data())
@settings(max_examples=200, deadline=None)
def test_strided_layout_addresses_every_element(shape, data):
    """Each input element the layout addresses is the one broadcasting gives, for views of any kind."""
    shape = tuple(shape)
    tensors = []
    for _ in range(data.draw(st.integers(1, 3))):
        keep = [data.draw(st.booleans()) for _ in shape]
        sub = tuple(s if k else 1 for s, k in zip(shape, keep))[data.draw(st.integers(0, len(shape))) :]
        base = torch.arange(max(1, torch.Size(sub).numel()) * 2, dtype=torch.float64)[::2][: torch.Size(sub).numel()]
        t = base.reshape(sub)
        if t.dim() >= 2 and data.draw(st.booleans()):
            t = t.transpose(0, -1).contiguous().transpose(0, -1)  # same values, strided storage
        tensors.append(t)
    contiguous, sizes, strides = layout(tensors, torch.Size(shape))
    if sizes is None:
        return  # more than RANK dims after merging: the runtime falls back
    n = torch.Size(shape).numel()
    for t, per_input in zip(tensors, strides):
        expected = t.expand(shape).reshape(-1)
        if contiguous:
            assert torch.equal(t.reshape(-1), expected)
            continue
        assert len(sizes) == RANK and len(per_input) == RANK
        index = torch.arange(n)
        offsets = torch.zeros(n, dtype=torch.long)
        for size, stride in zip(reversed(sizes), reversed(per_input)):
            offsets += (index % size) * stride
            index = index // size
        storage = torch.as_strided(t, (t.untyped_storage().nbytes() // 8,), (1,), 0)
        assert torch.equal(storage[offsets], expected)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.data())
@settings(max_examples=200, deadline=None)
def test_row_layout_addresses_every_row_and_column(shape, data):
    """Element (row, col) that the row layout addresses is the one broadcasting gives, rows in
    the row-major order of the dims other than the reduced one, for views of any kind."""
    shape = torch.Size(shape)
    dim = data.draw(st.integers(0, len(shape) - 1))
    tensors = []
    for _ in range(data.draw(st.integers(1, 3))):
        keep = [data.draw(st.booleans()) for _ in shape]
        sub = tuple(s if k else 1 for s, k in zip(shape, keep))[data.draw(st.integers(0, len(shape))) :]
        t = torch.randn(sub, dtype=torch.float64)
        if t.dim() >= 2 and data.draw(st.booleans()):
            t = t.transpose(0, -1).contiguous().transpose(0, -1)  # same values, strided storage
        tensors.append(t)
    plan = row_layout(tensors, shape, dim)
    if plan is None:
        return  # more than RANK - 1 row dims after merging: the runtime falls back
    outer, strides, contiguous = plan
    assert len(outer) == RANK - 1 and len(strides) == len(tensors) + 1
    rows, row_size = shape.numel() // shape[dim], shape[dim]
    output = torch.randn(shape, dtype=torch.float64)  # the outputs are contiguous tensors of `shape`
    for t, (*outer_strides, reduced) in zip([*tensors, output], strides):
        expected = t.expand(shape).movedim(dim, -1).reshape(rows, row_size)
        row, col = torch.arange(rows)[:, None], torch.arange(row_size)[None, :]
        if contiguous:
            offsets = row * row_size + col
        else:
            offsets, rest = col * reduced, row
            for size, stride in zip(reversed(outer), reversed(outer_strides)):
                offsets = offsets + (rest % size) * stride
                rest = rest // size
        storage = torch.as_strided(t, (t.untyped_storage().nbytes() // 8,), (1,), 0)
        assert torch.equal(storage[offsets], expected)
