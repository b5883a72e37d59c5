"""How the failover run explains a message handled twice: by when each handling's claim
was made, against the moment the standby was promoted."""

from __future__ import annotations

from chaos.failover import CLAIM_LOST, OUTCOME_LOST, UNEXPLAINED, Handled, explain

PROMOTED = 100.0


def handled(deliveries: int, *, at: float, claimed_at: float) -> Handled:
    return Handled(7, 1, deliveries, deliveries, at, claimed_at)


def test_a_claim_held_through_the_outage_and_made_again_on_the_new_primary_is_a_lost_claim():
    held = handled(1, at=PROMOTED + 0.5, claimed_at=PROMOTED - 1.5)  # handled once it answered
    again = handled(1, at=PROMOTED + 0.4, claimed_at=PROMOTED + 0.3)
    assert explain([again, held], PROMOTED) == [CLAIM_LOST]


def test_a_message_claimed_again_with_more_deliveries_after_the_promotion_lost_its_outcome():
    first = handled(1, at=PROMOTED - 1.0, claimed_at=PROMOTED - 1.1)
    again = handled(2, at=PROMOTED + 3.0, claimed_at=PROMOTED + 2.9)
    assert explain([first, again], PROMOTED) == [OUTCOME_LOST]


def test_two_claims_on_the_same_side_of_the_promotion_are_unexplained():
    before = [handled(1, at=PROMOTED - 2, claimed_at=PROMOTED - 3),
              handled(1, at=PROMOTED - 1, claimed_at=PROMOTED - 1.5)]
    after = [handled(2, at=PROMOTED + 2, claimed_at=PROMOTED + 1),
             handled(3, at=PROMOTED + 4, claimed_at=PROMOTED + 3)]
    assert explain(before, PROMOTED) == [UNEXPLAINED]
    assert explain(after, PROMOTED) == [UNEXPLAINED]
