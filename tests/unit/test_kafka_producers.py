"""Idempotent producers' sequence state (marekvs/gateway/kafka/producers.py): a retry of any
of the last five batches is a duplicate answered with its offset, sequences continue across
the int32 wrap, a new epoch starts at 0, an old one is fenced; the state reads back."""

from marekvs.gateway.kafka import producers as P
from marekvs.gateway.kafka.protocol import Error

OUT_OF_ORDER, FENCED = Error.OUT_OF_ORDER_SEQUENCE_NUMBER, Error.INVALID_PRODUCER_EPOCH


def test_the_last_five_batches_are_duplicates_and_sequences_wrap():
    st = None
    seq = P.SEQ_MOD - 12
    for i in range(7):  # seven batches of 3 records, crossing 2^31 - 1 -> 0
        first, last = seq % P.SEQ_MOD, (seq + 2) % P.SEQ_MOD
        assert P.check(st, 0, first, last) == P.Verdict(Error.NONE)
        st = P.decode(P.appended(st, 0, first, last, 1000 + i, 5).encode())
        seq += 3
    assert [P.check(st, 0, f, la).duplicate_of for f, la, _ in st.batches] == [1002, 1003, 1004, 1005, 1006]
    assert P.check(st, 0, (P.SEQ_MOD - 12) % P.SEQ_MOD, P.SEQ_MOD - 10).error == OUT_OF_ORDER  # out of the window
    assert P.check(st, 0, seq % P.SEQ_MOD, 0).error == Error.NONE
    assert P.check(st, 0, seq % P.SEQ_MOD + 1, 0).error == OUT_OF_ORDER


def test_epochs_and_unknown_producers():
    st = P.appended(None, 3, 0, 4, 77, 1)
    assert P.check(st, 2, 5, 5).error == FENCED
    assert P.check(st, 4, 5, 5).error == OUT_OF_ORDER and P.check(st, 4, 0, 0).error == Error.NONE
    assert P.check(None, 9, 1234, 1240).error == Error.NONE  # no state: any sequence (KIP-360)
    assert P.decode(b"garbage") is None and P.decode(None) is None
    assert P.producer_id(5, 3) == 5 << 16 | 3
