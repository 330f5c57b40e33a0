"""Hold-out traces, written after all tuning (dev, then the fixes ``fresh`` prompted): support
tickets, incident notes, code review comments, analyst chats, agent trajectories, and chatter that
borrows rule words.

Scored once as written (the unseen estimate): lesson recall 0.917 (11/12), precision 0.786
(11/14), chatter yield 0.20 ("Heads up, the wifi in room 4 is down again", "please never change,
you're great"). Three generic faults were then fixed (states of the moment, praise of the
assistant, "Not for us - ..." as a correction), so this part has been tuned on since too.

    .venv/bin/python -m bench.quality.distillation --split holdout
"""

from __future__ import annotations

from bench.quality.distillation.data import LESSONS, Lesson, Trace

_H = "holdout"
_LESSONS = {
    "h_refund": ("refund", "14 days|fourteen days"),
    "h_pg": ("postgres", "16"),
    "h_owner_ml": ("model registry|registry", "amara"),
    "h_tax_id": ("tax_id|tax id", "null"),
    "h_region": ("eu-central-1|frankfurt", "customer data"),
    "h_changelog": ("changelog", "pull request|pr"),
    "h_timeout": ("gateway", "30 s|30s|30 seconds"),
    "h_currency": ("amount_minor|minor units", "amount"),
    "h_fw": ("week", "sunday"),
    "h_escal": ("sev1|sev-1|severity 1", "15 minutes|15 min"),
    "h_pref_short": ("two paragraphs|2 paragraphs", "email|mail"),
    "h_naming": ("snake_case|snake case", "column"),
}
for lid, keys in _LESSONS.items():
    LESSONS[lid] = Lesson(lid, keys, _H, "holdout")

HOLDOUT: list[Trace] = []


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
    HOLDOUT.append(Trace(tid, _H, category, kind, owner, vis, groups, content, outcome, lessons))


_t(
    "h-1",
    "rule",
    "conversation",
    "dave",
    "org",
    "Customer: I bought this 3 weeks ago, can I get my money back?\n"
    "Agent: Let me check.\nSupervisor: Our policy: refunds are only possible within 14 days of purchase. Offer "
    "store credit instead.",
    ("h_refund",),
)
_t(
    "h-2",
    "fact",
    "note",
    "bob",
    "org",
    "Incident 4411 postmortem: the reporting DB runs on Postgres 16; the "
    "extension we relied on was built for 15, which caused the crash.",
    ("h_pg",),
)
_t(
    "h-3",
    "fact",
    "conversation",
    "carol",
    "group",
    "User: the model registry is Amara Okafor's, any change to "
    "it goes through her.\nAssistant: OK, I'll loop Amara in for registry changes.",
    ("h_owner_ml",),
)
_t(
    "h-4",
    "trajectory",
    "trajectory",
    "alice",
    "group",
    "Task: invoices without tax id\nTool: sql(SELECT * FROM "
    "invoices WHERE tax_id = '') -> 0 rows\nAgent: Empty result; missing tax ids are stored as NULL, not as empty "
    "strings.\nTool: sql(SELECT * FROM invoices WHERE tax_id IS NULL) -> 57 rows",
    ("h_tax_id",),
    "success",
)
_t(
    "h-5",
    "rule",
    "feedback",
    "carol",
    "org",
    "Security review finding: customer data may only be stored in "
    "eu-central-1 (Frankfurt). The test bucket in us-east-1 had to be deleted.",
    ("h_region",),
)
_t(
    "h-6",
    "rule",
    "conversation",
    "bob",
    "group",
    "Reviewer: this PR has no changelog entry.\nAuthor: is that "
    "needed for small fixes?\nReviewer: yes, every pull request needs a changelog entry, however small.",
    ("h_changelog",),
)
_t(
    "h-7",
    "trajectory",
    "trajectory",
    "dave",
    "org",
    "Task: export 2M rows via the API\nTool: api.export(all) -> "
    "504 Gateway Timeout after 30s\nAgent: The API gateway cuts requests at 30 seconds, so large exports have to be "
    "paged.\nTool: api.export(page=1..40) -> ok",
    ("h_timeout",),
    "success",
)
_t(
    "h-8",
    "convention",
    "note",
    "alice",
    "org",
    "Data dictionary: amount_minor holds the amount in minor units (cents, rappen); divide by 100 for display.",
    ("h_currency",),
)
_t(
    "h-9",
    "correction",
    "conversation",
    "carol",
    "private",
    "Assistant: Week 12 runs Monday to Sunday.\nUser: Not for us - the retail reporting week starts on Sunday.",
    ("h_fw",),
)
_t(
    "h-10",
    "rule",
    "note",
    "bob",
    "group",
    "On-call handbook: a SEV1 must be acknowledged within 15 minutes, day or night.",
    ("h_escal",),
)
_t(
    "h-11",
    "preference",
    "conversation",
    "alice",
    "private",
    "User: your emails are way too long. Keep any email you write for me to two paragraphs max.\nAssistant: Understood.",
    ("h_pref_short",),
)
_t(
    "h-12",
    "convention",
    "conversation",
    "dave",
    "org",
    "User: heads up for the new tables: column names are snake_case, never camelCase.\nAssistant: Thanks, I'll follow that.",
    ("h_naming",),
)
# chatter
_t("h-c1", "chatter", "conversation", "bob", "org", "User: the deploy went out fine, nice work team\nAssistant: Great to hear!")
_t(
    "h-c2",
    "chatter",
    "conversation",
    "alice",
    "private",
    "User: remind me, what did I ask you yesterday?\nAssistant: You asked for the Q2 revenue summary.",
)
_t("h-c3", "chatter", "note", "carol", "org", "Heads up, the wifi in room 4 is down again, IT is on it.")
_t(
    "h-c4",
    "chatter",
    "conversation",
    "dave",
    "org",
    "User: you must be tired of my questions by now haha\nAssistant: Not at all!",
)
_t("h-c5", "chatter", "conversation", "bob", "private", "User: what's 15% of 240?\nAssistant: 36.")
_t(
    "h-c6",
    "chatter",
    "trajectory",
    "alice",
    "org",
    "Task: create meeting\nTool: calendar.create(title=Sync, "
    "at=Tue 10:00) -> created\nAgent: The sync is booked for Tuesday 10:00.",
    (),
    "success",
)
_t(
    "h-c7",
    "chatter",
    "conversation",
    "carol",
    "org",
    "User: for the record, that was the best offsite ever\nAssistant: Glad you enjoyed it!",
)
_t("h-c8", "chatter", "feedback", "dave", "private", "Answer was ok but a bit slow today.")
_t("h-c9", "chatter", "conversation", "alice", "org", "User: is Priya in today?\nAssistant: I can't see calendars, sorry.")
_t("h-c10", "chatter", "conversation", "bob", "group", "User: please never change, you're great\nAssistant: Thank you!")
