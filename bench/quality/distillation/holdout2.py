"""A second hold-out, written after the fixes that ``holdout`` prompted: ops runbooks, sales and
HR conversations, agent trajectories with retries, German-English mixed notes, and chatter.

Scored once as written (the unseen estimate): lesson recall 0.80 (8/10), precision 1.00 (8/8),
chatter yield 0/10. The two misses were trajectories whose failed call says "still old IP" and
"unchanged" rather than an error word; the failure words were widened afterwards (so this part
has been tuned on since).

    .venv/bin/python -m bench.quality.distillation --split holdout2
"""

from __future__ import annotations

from bench.quality.distillation.data import LESSONS, Lesson, Trace

_H = "holdout2"
_LESSONS = {
    "h2_discount": ("discount", "20%|20 %|twenty percent", "vp|vice president"),
    "h2_pto": ("holiday|vacation|pto|leave", "2 weeks|two weeks"),
    "h2_dns": ("dns", "ttl|300"),
    "h2_owner_pay": ("payroll", "lukas"),
    "h2_fx": ("ecb", "exchange rate|fx"),
    "h2_ticket": ("jira", "bug"),
    "h2_cron": ("cron", "utc"),
    "h2_pw": ("1password|password manager", "password|credential"),
    "h2_schema_ts": ("updated_at", "trigger"),
    "h2_pref_call": ("call|phone", "slack|message"),
}
for lid, keys in _LESSONS.items():
    LESSONS[lid] = Lesson(lid, keys, _H, "holdout2")

HOLDOUT2: list[Trace] = []


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
    HOLDOUT2.append(Trace(tid, _H, category, kind, owner, vis, groups, content, outcome, lessons))


_t(
    "h2-1",
    "rule",
    "conversation",
    "alice",
    "group",
    "User: Can I offer Hooli 25% off to close this quarter?\n"
    "Assistant: I can prepare the quote.\nUser: Actually, hold on. Discounts above 20% need approval from the VP of "
    "Sales, so I'll ask her first.",
    ("h2_discount",),
)
_t(
    "h2-2",
    "rule",
    "note",
    "dave",
    "org",
    "HR update: employees can take at most 2 weeks of holiday in a row without director approval.",
    ("h2_pto",),
)
_t(
    "h2-3",
    "trajectory",
    "trajectory",
    "bob",
    "group",
    "Task: switch the api domain\nTool: dns.update(api, new_ip) "
    "-> ok\nTool: curl api -> still old IP after 1h\nAgent: Our DNS records have a TTL of 3600; lowering the TTL to "
    "300 a day before a switch avoids this.\nTool: dns.update(api, ttl=300) -> ok",
    ("h2_dns",),
    "success",
)
_t(
    "h2-4",
    "fact",
    "conversation",
    "carol",
    "org",
    "User: who can fix my payslip?\nAssistant: Maybe finance?\n"
    "User: turns out payroll is handled by Lukas Meier in HR, not finance.",
    ("h2_owner_pay",),
)
_t(
    "h2-5",
    "convention",
    "note",
    "alice",
    "group",
    "FX convention: all currency conversions use the ECB reference exchange rate of the previous business day.",
    ("h2_fx",),
)
_t(
    "h2-6",
    "rule",
    "conversation",
    "bob",
    "org",
    "User: found a bug in the export, should I just tell you?\n"
    "Assistant: Yes, tell me about it.\nUser: no wait, our process is that every bug gets a Jira ticket first, "
    "otherwise it gets lost.",
    ("h2_ticket",),
)
_t(
    "h2-7",
    "convention",
    "feedback",
    "carol",
    "org",
    "The nightly job ran at the wrong hour again. Cron schedules on our servers are in UTC, not local time.",
    ("h2_cron",),
)
_t(
    "h2-8",
    "rule",
    "conversation",
    "dave",
    "org",
    "User: can you paste the db password here?\nAssistant: Here "
    "it is: ...\nUser: stop! credentials are never shared in chat, they live in 1Password only.",
    ("h2_pw",),
)
_t(
    "h2-9",
    "trajectory",
    "trajectory",
    "alice",
    "org",
    "Task: fix stale updated_at\nTool: sql(UPDATE orders SET "
    "status='x' WHERE id=1) -> ok\nTool: sql(SELECT updated_at FROM orders WHERE id=1) -> unchanged\nAgent: "
    "updated_at is set by a trigger only on the app path; raw SQL updates must set updated_at themselves.",
    ("h2_schema_ts",),
    "success",
)
_t(
    "h2-10",
    "preference",
    "conversation",
    "carol",
    "private",
    "User: please don't call me for anything non-urgent, send a Slack message instead.\nAssistant: Noted, Slack first.",
    ("h2_pref_call",),
)
_t(
    "h2-c1",
    "chatter",
    "conversation",
    "alice",
    "org",
    "User: Frohe Weihnachten everyone! See you in January.\nAssistant: Happy holidays!",
)
_t(
    "h2-c2",
    "chatter",
    "conversation",
    "bob",
    "private",
    "User: I never know what to order at that sushi place\nAssistant: The salmon rolls are popular.",
)
_t("h2-c3", "chatter", "note", "carol", "org", "FYI the parking garage closes early on Friday for maintenance.")
_t(
    "h2-c4",
    "chatter",
    "conversation",
    "dave",
    "org",
    "User: you always find the right doc, how do you do that?\nAssistant: I search the knowledge base.",
)
_t(
    "h2-c5",
    "chatter",
    "conversation",
    "alice",
    "private",
    "User: what's the difference between a view and a table?\nAssistant: A view is a stored query; a table stores rows.",
)
_t(
    "h2-c6",
    "chatter",
    "trajectory",
    "bob",
    "org",
    "Task: restart the demo env\nTool: k8s.restart(demo) -> ok\nAgent: The demo environment is back up.",
    (),
    "success",
)
_t(
    "h2-c7",
    "chatter",
    "conversation",
    "carol",
    "org",
    "User: remember when the whole office lost power? chaos\nAssistant: That sounds memorable!",
)
_t("h2-c8", "chatter", "feedback", "dave", "org", "Thanks for the quick help with the slides.")
_t(
    "h2-c9",
    "chatter",
    "conversation",
    "alice",
    "org",
    "User: who is presenting at the all-hands tomorrow?\nAssistant: The agenda lists Priya and Marco.",
)
_t("h2-c10", "chatter", "conversation", "bob", "org", "User: must be nice to never sleep lol\nAssistant: :)")
