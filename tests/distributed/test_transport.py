"""Headers and records that cross process boundaries are validated before use."""

from __future__ import annotations

import pytest
import torch

from parafluid.distributed.endpoints import parse_endpoints
from parafluid.distributed.rendezvous import RendezvousError, _decode
from parafluid.distributed.transport import (
    HEADER_SIZE,
    MalformedHeader,
    decode_header,
    encode_header,
)
from parafluid.scope import SelectedRows

CPU = torch.device("cpu")


def test_header_round_trip_dense_and_rows():
    assert decode_header(encode_header(torch.zeros(3, 4, dtype=torch.float64), CPU), "t0") == \
        (False, torch.float64, (3, 4), -1)
    rows = SelectedRows(torch.tensor([1, 5]), torch.ones(2, 7), 10)
    assert decode_header(encode_header(rows, CPU), "t0") == (True, torch.float32, (2, 7), 10)
    assert encode_header(torch.zeros(()), CPU).shape == (HEADER_SIZE,)


@pytest.mark.parametrize("header, why", [
    ([2, 0, 1, -1, 3], "kind"),
    ([0, 99, 1, -1, 3], "dtype code"),
    ([0, 0, 9, -1, 3], "ndim"),
    ([0, 0, 2, -1, 3, -4], "negative dim"),
    ([0, 0, 3, -1, 1 << 20, 1 << 20, 1 << 20], "too many elements"),
    ([1, 0, 0, 5], "rows without a row dim"),
])
def test_malformed_headers_are_refused_before_allocating(header, why):
    head = torch.tensor(header + [0] * (HEADER_SIZE - len(header)), dtype=torch.int64)
    with pytest.raises(MalformedHeader, match="malformed header from trainer 1"):
        decode_header(head, "trainer 1")


def test_unsendable_values_are_named():
    with pytest.raises(TypeError, match="dtype torch.complex64 cannot be sent"):
        encode_header(torch.zeros(2, dtype=torch.complex64), CPU)
    with pytest.raises(ValueError, match="at most 8 dims"):
        encode_header(torch.zeros([1] * 9), CPU)


def test_rendezvous_records_are_validated():
    with pytest.raises(RendezvousError, match="malformed record"):
        _decode(b"{not json", "trainer 1 (a:1)")
    with pytest.raises(RendezvousError, match="without the fields"):
        _decode(b'{"endpoint": 3}', "trainer 1 (a:1)")
    with pytest.raises(RendezvousError, match="at most 65536"):
        _decode(b" " * 70000, "trainer 1 (a:1)")


def test_endpoint_lists_are_checked():
    assert parse_endpoints("a:1, b:2") == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="listed twice"):
        parse_endpoints("a:1,a:1")
    with pytest.raises(ValueError, match="must look like 'ip:port'"):
        parse_endpoints("a")
    with pytest.raises(ValueError, match="port must be in 1..65535"):
        parse_endpoints("a:0")
