"""A scripted stand-in for the host's `wait_for_tools` import."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


class ScriptedHost:
    """Answers calls with `handler(name, args)`; `per_round` limits how many answers one wait
    returns (oldest first), to exercise partial results."""

    def __init__(self, handler=None, per_round=None):
        self.handler = handler or (lambda name, args: {"tool": name, "args": args})
        self.per_round = per_round
        self.rounds = []  # the calls handed over in each wait
        self.pending = []

    def __call__(self, calls, timeout_ms):
        self.rounds.append([(n, json.loads(a)) for _, n, a, _ in calls])
        self.pending.extend(calls)
        take = len(self.pending) if self.per_round is None else self.per_round
        answered, self.pending = self.pending[:take], self.pending[take:]
        results = []
        for call_id, name, args, _ in answered:
            try:
                results.append((call_id, True, json.dumps(self.handler(name, json.loads(args)))))
            except Exception as e:  # the client's tool failed
                results.append((call_id, False, str(e)))
        return results
