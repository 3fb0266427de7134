"""The interleaved rounds both searches end with: order, and the fault policy per member."""

from __future__ import annotations

from tritontune.errors import ServerDiedError, ServerError
from tritontune.search.final_rounds import interleaved_rounds


class Server:
    """Restarts counted; ``dies``: by member, how many of its measurements kill the server."""

    def __init__(self, dies: dict[str, int]) -> None:
        self.dies, self.restarts, self.order = dict(dies), 0, []

    def fault(self, err: ServerError) -> ServerDiedError | None:
        return err if isinstance(err, ServerDiedError) else None

    def restart(self, *, reload: bool = False) -> None:
        self.restarts += 1

    def measure(self, member: str) -> float:
        if self.dies.get(member, 0) > 0:
            self.dies[member] -= 1
            raise ServerDiedError("tritonserver died (exit code -9)", "Segfault\n")
        if member == "refused":
            raise ServerError("failed to load 'mlp': refused")
        self.order.append(member)
        return float(len(self.order))


def test_members_are_measured_round_by_round_and_a_fault_leaves_only_its_member_out():
    server = Server(dies={"b": 1, "c": 2})
    seen: list[tuple[int, str, float | None]] = []
    rounds = interleaved_rounds(
        server, ["a", "b", "c", "refused"], 2, server.measure, lambda r, m, f: seen.append((r, m, f))
    )
    assert server.order == ["a", "b", "a", "b"]  # interleaved; b died once and was measured again
    assert rounds.figures == {0: [1.0, 3.0], 1: [2.0, 4.0], 2: [], 3: []}
    assert rounds.errors[2].startswith("brought the server down 2 times")
    assert "refused" in rounds.errors[3]
    assert server.restarts == 3
    assert [(r, m) for r, m, f in seen if f is None] == [(1, "c"), (1, "refused")]


def test_settled_members_sit_out_the_later_rounds_and_all_settled_ends_them():
    server = Server(dies={})
    figures = {"a": 100.0, "b": 10.0, "c": 90.0}
    asked: list[dict[int, list[float]]] = []

    def settle_b(so_far: dict[int, list[float]]) -> set[int]:
        asked.append({i: list(f) for i, f in so_far.items()})
        return {1} if len(so_far[0]) >= 2 else set()

    rounds = interleaved_rounds(server, ["a", "b", "c"], 4, lambda m: figures[m], settled=settle_b)
    assert [len(rounds.figures[i]) for i in range(3)] == [4, 2, 4]
    assert rounds.settled == {1: 2}
    assert len(asked) == 3  # before rounds 2, 3 and 4

    everyone = interleaved_rounds(server, ["a", "b"], 5, lambda m: figures[m], settled=lambda f: {0, 1})
    assert [len(everyone.figures[i]) for i in range(2)] == [1, 1]  # asked after round 1: all settled
    assert everyone.settled == {0: 1, 1: 1}
