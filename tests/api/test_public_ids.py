"""Public ids: their shape, and every base36 digit equally likely (an uneven mapping of random bytes
onto 36 digits would make four of them ~12 % more likely)."""

from __future__ import annotations

from collections import Counter

from agentcal.ids import PUBLIC_ID_MAX_LENGTH, is_public_id, new_public_id


def test_an_id_is_its_prefix_and_twenty_base36_digits() -> None:
    made = {new_public_id("hld") for _ in range(1000)}
    assert len(made) == 1000
    for public_id in made:
        prefix, digits = public_id.split("_")
        assert prefix == "hld" and len(digits) == 20 and is_public_id(public_id)
        assert len(public_id) <= PUBLIC_ID_MAX_LENGTH


def test_every_digit_is_equally_likely() -> None:
    counts = Counter("".join(new_public_id("x").removeprefix("x_") for _ in range(20_000)))
    expected = 20_000 * 20 / 36  # 11,111 each; one standard deviation is ~104
    assert len(counts) == 36
    assert all(abs(count - expected) < 6 * 104 for count in counts.values()), counts.most_common()
