"""`IdSource.reserve(n)` (the parallel scheduler's id blocks) hands out the same ids as
`take(n)` and moves the counter alike, without building the array; under a lease it draws from
the lease, as `take` does."""

from cqlstream.engine.operators.base import IdSource, Lease, leased


def test_reserve_is_take_without_the_array() -> None:
    a, b = IdSource(5), IdSource(5)
    for n in (1, 3, 1024, 7):
        assert a.reserve(n) == int(b.take(n)[0])
        assert a.next_id == b.next_id


def test_reserve_under_a_lease_draws_from_it() -> None:
    ids = IdSource(1)
    lease = Lease(ids, 100, 200)
    with leased(lease):
        assert ids.reserve(10) == 100
        assert ids.take(2).tolist() == [110, 111]
    assert ids.next_id == 1 and lease.next == 112
