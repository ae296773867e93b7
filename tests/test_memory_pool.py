"""ReqToTokenPool and TokenToKVPool: slot accounting, double frees, and the KV layout."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.memory_pool import ReqToTokenPool, TokenToKVPool


def make_kv_pool(size=8):
    return TokenToKVPool(size, num_layers=3, num_kv_heads=2, head_dim=4, dtype=torch.float32)


def test_req_pool_shapes_and_accounting():
    pool = ReqToTokenPool(3, max_context_len=5)
    assert pool.req_to_token.shape == (3, 5) and pool.req_to_token.dtype == torch.int64
    got = [pool.alloc() for _ in range(3)]
    assert sorted(got) == [0, 1, 2]
    assert pool.available_size() == 0
    assert pool.alloc() is None
    pool.free(got[1])
    assert pool.available_size() == 1
    assert pool.alloc() == got[1]


def test_req_pool_double_free_and_bad_id_raise():
    pool = ReqToTokenPool(2, max_context_len=4)
    idx = pool.alloc()
    pool.free(idx)
    with pytest.raises(ValueError, match=f"double free of request slot {idx}"):
        pool.free(idx)
    with pytest.raises(ValueError, match="out of range"):
        pool.free(7)
    assert pool.available_size() == 2


def test_kv_pool_buffers_have_one_row_per_slot_and_head():
    pool = make_kv_pool(8)
    assert len(pool.k_buffer) == len(pool.v_buffer) == 3
    for buf in pool.k_buffer + pool.v_buffer:
        assert buf.shape == (2, 8, 4) and buf.dtype == torch.float32  # [kv_heads, slots, head_dim]
    # Layers own separate storage, so writing one layer leaves the others untouched.
    pool.k_buffer[0][:, 3] = 1.0
    assert pool.k_buffer[1].abs().sum() == 0


def test_kv_pool_alloc_free_accounting():
    pool = make_kv_pool(8)
    a = pool.alloc(5)
    assert a.dtype == torch.int64 and a.shape == (5,)
    assert len(set(a.tolist())) == 5
    assert pool.available_size() == 3
    assert pool.alloc(4) is None
    assert pool.available_size() == 3  # a failed alloc takes nothing
    b = pool.alloc(3)
    assert set(a.tolist()).isdisjoint(b.tolist())
    assert pool.available_size() == 0
    pool.free(a[1:3])
    assert pool.available_size() == 2
    assert sorted(pool.alloc(2).tolist()) == sorted(a[1:3].tolist())
    assert pool.alloc(0).numel() == 0


def test_kv_pool_double_free_raises_and_frees_nothing():
    pool = make_kv_pool(8)
    slots = pool.alloc(4)
    pool.free(slots[:2])
    with pytest.raises(ValueError, match=r"double free of KV slots \[" + str(int(slots[0]))):
        pool.free(slots)  # slots[2:] are live but the call must not free them either
    assert pool.available_size() == 6
    with pytest.raises(ValueError, match="listed twice"):
        pool.free(torch.tensor([int(slots[2]), int(slots[2])]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 8\)"):
        pool.free(torch.tensor([8]))
    assert pool.available_size() == 6


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="size > 0"):
        ReqToTokenPool(0, 4)
    with pytest.raises(ValueError, match="size > 0"):
        TokenToKVPool(0, 1, 1, 1, torch.float32)
    with pytest.raises(ValueError, match="negative"):
        make_kv_pool().alloc(-1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), max_size=40))
def test_kv_pool_matches_a_set_model(ops):
    """Random alloc/free sequences: the pool agrees with a plain Python set of live slots."""
    size = 12
    pool = make_kv_pool(size)
    live: list[int] = []
    for is_alloc, n in ops:
        if is_alloc:
            slots = pool.alloc(n)
            if size - len(live) < n:
                assert slots is None
            else:
                assert slots is not None and not set(slots.tolist()) & set(live)
                live += slots.tolist()
        elif live:
            k = min(n, len(live))
            pool.free(torch.tensor(live[:k], dtype=torch.int64))
            live = live[k:]
        assert pool.available_size() == size - len(live)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), max_size=30))
def test_req_pool_matches_a_set_model(ops):
    pool = ReqToTokenPool(4, max_context_len=2)
    live: list[int] = []
    for is_alloc in ops:
        if is_alloc:
            idx = pool.alloc()
            if len(live) == 4:
                assert idx is None
            else:
                assert idx not in live and 0 <= idx < 4
                live.append(idx)
        elif live:
            pool.free(live.pop(0))
        assert pool.available_size() == 4 - len(live)
