"""A third, small part written *after* the lesson finder was tuned on ``dev`` (and after ``test``
was reported once), in styles the other parts use little: e-mail and Slack-like messages, longer
multi-turn chats, JSON tool output, lessons buried mid-turn, and chatter that looks like rules.
Scored once as written: lesson recall 0.917, precision 0.647, chatter yield 0.40 (4 of 10 chatter
traces: "always the same with this printer", "never seen such a slow Monday lol", "make sure to
have a great weekend", "heads up: cake in the kitchen"). The generic faults it showed were then
fixed (always/never + non-verb, laughter/wishes/social events, a sentence that is only "keep that
in mind", "X runs the Y" ownership), so it has been tuned on since; ``holdout`` (holdout.py) was
written after that and is the unseen check.

    .venv/bin/python -m bench.quality.distillation --split fresh
"""

from __future__ import annotations

from bench.quality.distillation.data import LESSONS, Lesson, Trace

_F = "fresh"

_LESSONS = {
    "f_sla": ("sla|response time", "4 hours|four hours|4h"),
    "f_owner_search": ("search", "jonas"),
    "f_eur": ("eur", "invoice"),
    "f_prod_ro": ("read-only|read only", "replica"),
    "f_tz_api": ("epoch|milliseconds|ms", "created"),
    "f_quote": ("quote|quotation", "30 days"),
    "f_notebook": ("staging", "load test"),
    "f_hr": ("salary|salaries", "hr"),
    "f_rate": ("429", "retry-after|retry after|back off|backoff"),
    "f_status": ("status page|statuspage", "customer"),
    "f_csv_sep": ("semicolon|;", "csv"),
    "f_legal": ("nda", "legal"),
}
for lid, keys in _LESSONS.items():
    LESSONS[lid] = Lesson(lid, keys, _F, "fresh")

FRESH: list[Trace] = []


def _t(
    tid: str,
    category: str,
    kind: str,
    owner: str,
    vis: str,
    content: str,
    lessons: tuple[str, ...] = (),
    outcome: str | None = None,
    groups: tuple[str, ...] = (),
) -> None:
    if vis == "group" and not groups:
        groups = ("eng",) if owner in ("bob", "carol") else ("finance",)
    FRESH.append(Trace(tid, _F, category, kind, owner, vis, groups, content, outcome, lessons))


_t(
    "fr-1",
    "rule",
    "note",
    "alice",
    "org",
    "Hi all,\n\nquick reminder that our support SLA is a first response "
    "within 4 hours on business days. Please keep that in mind when triaging.\n\nBest, Alice",
    ("f_sla",),
)
_t(
    "fr-2",
    "fact",
    "conversation",
    "bob",
    "org",
    "User: who do I ask about the search cluster?\nAssistant: I'm not "
    "sure who owns it.\nUser: Jonas Berg runs the search cluster, ping him on Slack.\nAssistant: Thanks!",
    ("f_owner_search",),
)
_t(
    "fr-3",
    "preference",
    "conversation",
    "carol",
    "private",
    "User: can you draft the invoice for Globex?\n"
    "Assistant: Sure, here is the draft in USD.\nUser: hmm, Globex is billed in EUR. Invoices for EU customers are "
    "always issued in EUR.\nAssistant: Fixed, the draft is now in EUR.",
    ("f_eur",),
)
_t(
    "fr-4",
    "trajectory",
    "trajectory",
    "dave",
    "org",
    "Task: backfill the orders table\nTool: db.exec(host=replica-2, "
    'sql=INSERT ...) -> {"error": "cannot execute INSERT in a read-only transaction"}\nAgent: replica-2 is a '
    "read-only replica; writes have to go to the primary.\nTool: db.exec(host=primary, sql=INSERT ...) -> "
    '{"rows": 1200}',
    ("f_prod_ro",),
    "success",
)
_t(
    "fr-5",
    "convention",
    "conversation",
    "alice",
    "group",
    "User: the created field in the events API, what unit "
    "is it?\nAssistant: Seconds, I think.\nUser: no - created is epoch milliseconds, that's why your dates were in "
    "1970.",
    ("f_tz_api",),
)
_t(
    "fr-6",
    "rule",
    "feedback",
    "carol",
    "org",
    "Customers keep asking about old quotes. Going forward, all quotes are valid for 30 days only; say so in every quote.",
    ("f_quote",),
)
_t(
    "fr-7",
    "rule",
    "conversation",
    "bob",
    "group",
    "bob: where should the load test run?\nagent: I can run it "
    "against production.\nbob: please don't! load tests only ever run on the staging cluster.",
    ("f_notebook",),
)
_t(
    "fr-8",
    "rule",
    "note",
    "alice",
    "group",
    "Confidential: salary data must never leave the HR system; send aggregates only.",
    ("f_hr",),
    groups=("finance",),
)
_t(
    "fr-9",
    "trajectory",
    "trajectory",
    "bob",
    "org",
    "Task: sync contacts\nTool: crm.sync() -> 429 Too Many "
    "Requests (Retry-After: 30)\nTool: crm.sync() -> 429 Too Many Requests\nAgent: The CRM rate-limits us; on a 429 "
    "we must wait for the Retry-After seconds before calling again.\nTool: sleep(30); crm.sync() -> 200 OK",
    ("f_rate",),
    "success",
)
_t(
    "fr-10",
    "rule",
    "conversation",
    "dave",
    "org",
    "User: one more thing - outages are communicated to customers "
    "through the status page, never by individual emails.\nAssistant: Got it, status page only.",
    ("f_status",),
)
_t(
    "fr-11",
    "convention",
    "note",
    "carol",
    "private",
    "Note to self: the finance exports use a semicolon as the CSV separator, not a comma.",
    ("f_csv_sep",),
)
_t(
    "fr-12",
    "rule",
    "conversation",
    "alice",
    "org",
    "User: before we share the roadmap with Initech, they need to "
    "sign an NDA. Every NDA is reviewed by legal first.\nAssistant: Understood.",
    ("f_legal",),
)
# chatter that looks like lessons
_t(
    "fr-c1",
    "chatter",
    "conversation",
    "bob",
    "org",
    "User: always the same with this printer, honestly\nAssistant: Sorry about that!",
)
_t("fr-c2", "chatter", "note", "alice", "org", "Heads up: cake in the kitchen at 3pm for Maria's birthday!")
_t("fr-c3", "chatter", "conversation", "carol", "private", "User: remember to smile :)\nAssistant: Will do!")
_t("fr-c4", "chatter", "conversation", "dave", "org", "User: FYI I'm working from home today.\nAssistant: Noted.")
_t(
    "fr-c5",
    "chatter",
    "conversation",
    "bob",
    "private",
    "User: can you explain what a foreign key is?\n"
    "Assistant: A foreign key is a column that references the primary key of another table.",
)
_t("fr-c6", "chatter", "conversation", "alice", "org", "User: the meeting is at 3 today, right?\nAssistant: Yes, 3pm in room B.")
_t(
    "fr-c7",
    "chatter",
    "trajectory",
    "dave",
    "private",
    "Task: list files\nTool: ls(/reports) -> q1.pdf, q2.pdf\nAgent: Two reports are in the folder.",
    (),
    "success",
)
_t("fr-c8", "chatter", "feedback", "carol", "org", "Great work everyone, the launch went smoothly!")
_t("fr-c9", "chatter", "conversation", "bob", "org", "User: never seen such a slow Monday lol\nAssistant: Haha.")
_t("fr-c10", "chatter", "conversation", "alice", "private", "User: make sure to have a great weekend!\nAssistant: You too!")
