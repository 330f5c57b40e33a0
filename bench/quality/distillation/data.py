"""Labelled traces for the distillation benchmark, written by hand before the pipeline was tuned.

Each *lesson family* is one piece of knowledge an enterprise agent should keep (a rule, a
preference, a fact about a person or system, a data convention, the fix a trajectory found, a
correction of the agent), told in several traces with different wording, speakers, trace kinds
and visibility. ``keys`` are the values a memory must keep to state the lesson: every group
(alternatives separated by ``|``) must occur in the memory text, case-insensitively.

Chatter traces (greetings, thanks, meta talk, transient status, questions, general knowledge,
cue words used without a lesson) hold nothing; any memory from them is a false positive.

Split: whole families (and chatter items) are either ``dev`` or ``test``, so a phrasing tuned on
dev never reappears in test with the same lesson. Tune on dev; report on test.

Users of the benchmark org: alice (group finance), bob (group eng), carol (finance, eng),
dave (no group).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.quality.distillation.chatter import CHATTER
from bench.quality.distillation.corrections import CORRECTIONS
from bench.quality.distillation.trajectories import TRAJECTORIES

USERS = {"alice": ("finance",), "bob": ("eng",), "carol": ("finance", "eng"), "dave": ()}


@dataclass(frozen=True)
class Trace:
    id: str
    split: str  # dev | test
    category: str  # rule | preference | fact | convention | trajectory | correction | chatter
    kind: str  # conversation | trajectory | note | feedback
    owner: str
    visibility: str  # private | group | org
    groups: tuple[str, ...]
    content: str
    outcome: str | None = None
    lessons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lesson:
    id: str
    keys: tuple[str, ...]  # each: alternatives separated by "|"
    split: str
    category: str


@dataclass
class _Fam:
    lesson: Lesson
    traces: list[tuple] = field(default_factory=list)


LESSONS: dict[str, Lesson] = {}
TRACES: list[Trace] = []


def _fam(lid: str, keys: tuple[str, ...], split: str, category: str, *traces: tuple) -> None:
    """traces: (kind, owner, visibility, content[, outcome[, groups[, extra lesson ids]]])."""
    LESSONS[lid] = Lesson(lid, keys, split, category)
    for i, t in enumerate(traces):
        kind, owner, vis, content = t[:4]
        outcome = t[4] if len(t) > 4 else None
        groups = t[5] if len(t) > 5 else ()
        extra = t[6] if len(t) > 6 else ()
        if vis == "group" and not groups:
            groups = USERS[owner][:1]
        cat = "trajectory" if kind == "trajectory" else category
        TRACES.append(Trace(f"{lid}-{i + 1}", split, cat, kind, owner, vis, tuple(groups), content, outcome,
                            (lid, *extra)))


# -- explicit rules ------------------------------------------------------------------------------

_fam("frz", ("friday", "deploy|release"), "test", "rule",
     ("conversation", "alice", "org", "User: Remember that production deploys are frozen every Friday, team rule "
      "FRZ-2. Assistant: Noted, no Friday deploys."),
     ("note", "bob", "org", "Heads up: no production releases on Fridays, the on-call rota is too thin. Thanks all!"),
     ("conversation", "bob", "private", "Human: can you schedule the billing deploy for friday afternoon?\n"
      "Assistant: Sure, I have scheduled it for Friday 16:00.\nHuman: wait, no. We never deploy to production on "
      "Fridays. Move it to Thursday."))

_fam("chf", ("revenue", "chf|swiss franc"), "dev", "rule",
     ("conversation", "alice", "private", "User: Report all revenue figures in Swiss francs, code CHF, never in "
      "dollars.\nAssistant: Understood, I will use CHF from now on."),
     ("conversation", "alice", "group", "alice: from now on please show revenue in CHF in every summary you prepare "
      "for the finance team\nassistant: ok, CHF it is"),
     ("feedback", "carol", "private", "The Q3 revenue table was in USD again. Revenue must always be reported in CHF."))

_fam("pr2", ("two approv|2 approv", "merg|pull request|pr"), "dev", "rule",
     ("note", "bob", "org", "Team rule: every pull request needs two approvals before it is merged."),
     ("conversation", "carol", "group", "User: please always wait for 2 approvals before you merge a PR.\n"
      "Assistant: OK, I'll wait for two reviews.", None, ("eng",)))

_fam("pii", ("phone", "vendor"), "test", "rule",
     ("note", "carol", "org", "Policy reminder: never send customer phone numbers to external vendors."),
     ("conversation", "dave", "org", "User: please never paste customer phone numbers into vendor tickets.\n"
      "Agent: Understood, I'll redact them."))

_fam("cc", ("legal", "contract"), "dev", "rule",
     ("conversation", "bob", "private", "User: From now on, cc legal on every contract email you draft for me.\n"
      "Assistant: Will do."),
     ("note", "alice", "group", "Going forward, all contract emails must copy the legal team."))

_fam("iso", ("yyyy-mm-dd|iso", "date"), "test", "preference",
     ("conversation", "carol", "private", "User: Please always write dates as YYYY-MM-DD in reports.\n"
      "Assistant: Sure."),
     ("conversation", "dave", "private", "Human: use ISO dates (YYYY-MM-DD) in everything you send me, the US "
      "format confuses my team\nAI: Noted."))

_fam("commit", ("ticket", "commit"), "dev", "rule",
     ("conversation", "bob", "group", "User: please always put the ticket number in your commit messages, "
      "like OPS-1234: fix retry.\nAssistant: Got it.", None, ("eng",)),
     ("feedback", "carol", "org", "Commits without a ticket number get rejected by the release bot; "
      "always include the ticket number in the commit message."))

_fam("cfo10k", ("10,000|10000|10k|10 000", "cfo"), "test", "rule",
     ("note", "alice", "group", "For the record: invoices above 10,000 EUR need CFO sign-off before payment."),
     ("conversation", "carol", "org", "User: going forward any invoice over 10k has to be signed off by the CFO.\n"
      "Assistant: Understood, I'll route those to the CFO."))

_fam("anon", ("anonymi", "demo"), "dev", "rule",
     ("note", "dave", "org", "Make sure customer names are anonymised in demo datasets."),
     ("conversation", "alice", "org", "User: heads up, before any sales demo the customer names in the dataset "
      "must be anonymised.\nAssistant: Thanks, I will anonymise them."))

_fam("mig", ("migration", "business hours|working hours"), "test", "rule",
     ("conversation", "bob", "org", "User: Do not run database migrations on the primary during business hours.\n"
      "Assistant: Understood."),
     ("feedback", "bob", "group", "Yesterday's outage came from a migration run at 11am. Migrations only outside "
      "business hours, please.", None, ("eng",)))

_fam("mfa", ("mfa", "manager"), "dev", "procedure",
     ("note", "dave", "org", "To reset a user's MFA, open a security ticket and attach the manager's approval."),
     ("conversation", "carol", "group", "User: remember that MFA resets always need written approval from the "
      "person's manager.\nAssistant: Noted.", None, ("eng",)))

_fam("inc", ("#ops-incidents", "incident"), "test", "rule",
     ("note", "bob", "org", "Heads up: incidents are announced in #ops-incidents, not in #general."),
     ("conversation", "dave", "private", "User: where should I post the outage notice?\nAssistant: In #general.\n"
      "User: no, incidents go to #ops-incidents. Please remember that."))

# -- preferences -------------------------------------------------------------------------------

_fam("bullets", ("bullet",), "test", "preference",
     ("conversation", "alice", "private", "User: I prefer short bullet-point summaries over long paragraphs.\n"
      "Assistant: Noted."),
     ("conversation", "bob", "private", "bob: could you keep answers as bullet points? long paragraphs are hard to "
      "read on my phone\nagent: sure thing"))

_fam("morning", ("morning", "meeting"), "dev", "preference",
     ("conversation", "carol", "private", "User: I'd rather have meetings in the morning, afternoons are for focus "
      "work.\nAssistant: I'll book mornings."),
     ("note", "carol", "private", "Reminder to self and the assistant: I like all my meetings before noon, "
      "mornings only."))

_fam("pyscript", ("python", "notebook"), "test", "preference",
     ("conversation", "bob", "private", "User: I prefer Python scripts over notebooks for anything that goes to "
      "production.\nAssistant: Understood."),
     ("note", "bob", "private", "Personal preference: anything for production is written as Python scripts, not Jupyter notebooks."))

_fam("german", ("german", "dach"), "dev", "preference",
     ("conversation", "alice", "org", "User: please reply to customers from DACH in German.\n"
      "Assistant: Will do."),
     ("feedback", "dave", "org", "A Swiss customer complained about an English reply. DACH customers get "
      "replies in German."))

_fam("csv", ("csv", "excel|xlsx"), "test", "preference",
     ("conversation", "dave", "private", "Human: when you export tables for me, I want CSV files, not Excel.\n"
      "AI: OK, CSV from now on."),
     ("conversation", "carol", "private", "User: Send me CSV rather than XLSX please, our tooling can't read "
      "Excel.\nAssistant: Sure."))

_fam("darkcharts", ("colour-blind|colorblind|color-blind", "chart|palette"), "dev", "preference",
     ("conversation", "bob", "group", "User: for the eng dashboards please always use the colour-blind safe "
      "palette in charts.\nAssistant: OK.", None, ("eng",)),
     ("feedback", "carol", "org", "The new charts were unreadable for Tom. Use the colorblind-friendly palette for all charts."))

# -- facts about people, owners, systems ----------------------------------------------------

_fam("billing_owner", ("priya", "billing"), "test", "fact",
     ("note", "alice", "org", "For the record, Priya Shah is the owner of the billing dashboard; access requests "
      "go to her."),
     ("conversation", "dave", "org", "User: who owns the billing dashboard?\nAssistant: I am not sure.\n"
      "User: Priya Shah owns the billing dashboard, ask her for access."))

_fam("payments_contact", ("marco", "payments"), "dev", "fact",
     ("note", "bob", "org", "Marco Rossi is the escalation contact for the payments service."),
     ("conversation", "carol", "group", "User: FYI the escalation contact for payments is Marco Rossi.\n"
      "Assistant: Thanks.", None, ("eng",)))

_fam("kafka", ("kafka", "10k|10,000|10000|10 000"), "test", "fact",
     ("note", "bob", "org", "Kafka consumer lag above 10k messages pages the platform team."),
     ("conversation", "carol", "group", "User: heads up, when Kafka lag goes over 10,000 the platform on-call gets "
      "paged.\nAssistant: Good to know.", None, ("eng",)))

_fam("snowflake", ("snowflake", "warehouse"), "dev", "fact",
     ("conversation", "alice", "org", "User: Our data warehouse runs on Snowflake, not BigQuery.\n"
      "Assistant: Thanks for clarifying."),
     ("note", "dave", "org", "Just so you know: the warehouse is Snowflake (account acme-eu)."))

_fam("vpn", ("vpn", "admin"), "test", "fact",
     ("note", "dave", "org", "Heads up: the admin panel is only reachable over the VPN."),
     ("trajectory", "bob", "private", "Task: open the admin panel user list\nTool: http_get(https://admin.acme.internal/users) "
      "-> ERROR: connection timed out\nAgent: The admin panel only answers inside the VPN. Connecting the VPN first.\n"
      "Tool: vpn_connect() -> ok\nTool: http_get(https://admin.acme.internal/users) -> 200 OK", "success"))

_fam("backup", ("backup", "02:00|2am|2 am|2:00"), "dev", "fact",
     ("note", "carol", "org", "Backups of the main database run nightly at 02:00 UTC."),
     ("conversation", "bob", "org", "User: when do the DB backups run?\nAssistant: I don't know.\nUser: nightly "
      "at 2am UTC, avoid heavy jobs then."))

_fam("logret", ("30 days", "log"), "test", "fact",
     ("note", "bob", "org", "Application logs are kept for 30 days, then deleted."),
     ("conversation", "alice", "private", "User: for the audit, keep in mind that application logs are retained "
      "for 30 days only.\nAssistant: Noted."))

_fam("standup", ("standup|stand-up", "9:30|09:30"), "dev", "fact",
     ("note", "carol", "group", "The eng standup is at 9:30 every weekday.", None, ("eng",)),
     ("conversation", "bob", "group", "User: for the record the standup is at 09:30, not 10.\nAssistant: Updated "
      "the calendar.", None, ("eng",)))

# -- schema and data conventions ---------------------------------------------------------------

_fam("cents", ("cent", "amount"), "test", "convention",
     ("conversation", "carol", "org", "User: for the record, amounts in the payments table are in cents, not "
      "euros.\nAssistant: Thanks, I'll divide by 100."),
     ("trajectory", "alice", "group", "Task: total revenue for March\nTool: sql(SELECT SUM(amount) FROM payments "
      "WHERE month = '2024-03') -> 48213900\nUser: that's 100x too high.\nAgent: The amount column is stored in cents; "
      "dividing by 100.\nTool: sql(SELECT SUM(amount) / 100.0 FROM payments WHERE month = '2024-03') -> 482139.00\n"
      "User: correct, thanks.", "success"))

_fam("fy", ("fiscal year", "february"), "dev", "convention",
     ("conversation", "alice", "org", "User: Just so you know, our fiscal year starts on 1 February, not in "
      "January.\nAssistant: Got it."),
     ("conversation", "carol", "group", "Assistant: Q1 covers January to March.\nUser: No, that's wrong. The fiscal "
      "year starts in February, so Q1 is February to April.", None, ("finance",)))

_fam("tz", ("utc", "timestamp"), "test", "convention",
     ("note", "dave", "org", "FYI: all timestamps in the events table are stored in UTC."),
     ("conversation", "alice", "private", "User: the times you showed are off by an hour.\nAssistant: Sorry!\n"
      "User: event timestamps are in UTC, convert them to Zurich time for me."))

_fam("status9", ("9", "cancel"), "dev", "convention",
     ("conversation", "alice", "org", "User: careful, in the orders table status 9 means cancelled, exclude those "
      "from revenue.\nAssistant: Understood."),
     ("conversation", "dave", "org", "Assistant: I counted all orders including status 9.\nUser: No, status 9 "
      "means cancelled; cancelled orders never count."))

_fam("active", ("active", "90 days"), "test", "convention",
     ("note", "carol", "org", "Definition: an active customer is one with an order in the last 90 days."),
     ("conversation", "bob", "org", "User: Sales ops agreed that 'active customer' means an order in the last 90 "
      "days.\nAssistant: Noted, I'll use that definition."))

_fam("region", ("r2", "emea"), "dev", "convention",
     ("conversation", "carol", "group", "User: region code R2 is EMEA in the sales tables.\nAssistant: Thanks.",
      None, ("finance",)),
     ("trajectory", "alice", "group", "Task: EMEA bookings last quarter\nTool: sql(SELECT SUM(net) FROM bookings "
      "WHERE region = 'EMEA') -> 0 rows\nAgent: Regions are stored as codes; R2 is EMEA.\nTool: sql(SELECT SUM(net) "
      "FROM bookings WHERE region = 'R2') -> 1,204,330\nUser: matches the dashboard.", "success"))

_fam("netamt", ("net_amount", "revenue"), "test", "convention",
     ("note", "alice", "group", "For revenue, always use the net_amount column, not gross_amount."),
     ("conversation", "carol", "org", "Assistant: Revenue last month was 1.2M (sum of gross_amount).\nUser: Wrong "
      "column. Revenue is the sum of net_amount; gross_amount includes VAT."))

_fam("custid", ("cust_id", "crm_accounts"), "dev", "convention",
     ("note", "bob", "org", "Schema note: orders.cust_id joins to crm_accounts.id."),
     ("trajectory", "dave", "org", "Task: orders per account\nTool: sql(SELECT a.name, count(*) FROM orders o JOIN "
      "crm_accounts a ON o.customer_id = a.id GROUP BY 1) -> ERROR: column o.customer_id does not exist\n"
      "Agent: The orders table uses cust_id as the key to crm_accounts.\nTool: sql(SELECT a.name, count(*) FROM "
      "orders o JOIN crm_accounts a ON o.cust_id = a.id GROUP BY 1) -> 412 rows", "success"))

_fam("arr", ("arr", "one-off|one off|one-time"), "test", "convention",
     ("note", "alice", "org", "Glossary: ARR means annual recurring revenue and excludes one-off fees."),
     ("conversation", "carol", "group", "Assistant: ARR is 4.1M including the setup fees.\nUser: no, ARR never "
      "includes one-time setup fees.", None, ("finance",)))

_fam("churn", ("churn", "all"), "dev", "convention",
     ("note", "carol", "org", "Churn counts only accounts that cancelled all of their subscriptions."),
     ("conversation", "dave", "org", "Assistant: Churn is 4% (accounts that cancelled any subscription).\nUser: Wrong, churn only counts accounts that cancelled all their subscriptions."))

_fam("soft_delete", ("deleted_at", "null"), "test", "convention",
     ("note", "bob", "org", "In the users table, rows with deleted_at not null are soft-deleted and must be "
      "excluded from counts."),
     ("trajectory", "dave", "org", "Task: count users\nTool: sql(SELECT count(*) FROM users) -> 10452\nUser: too many, "
      "the dashboard says 9,870.\nAgent: Soft-deleted users have deleted_at set; filtering WHERE deleted_at IS NULL.\n"
      "Tool: sql(SELECT count(*) FROM users WHERE deleted_at IS NULL) -> 9870\nUser: that's it.", "success"))

_fam("weeks", ("iso week|iso-week", "monday"), "dev", "convention",
     ("note", "alice", "org", "Reporting weeks are ISO weeks starting on Monday."),
     ("conversation", "bob", "org", "User: heads up: our reporting weeks are ISO weeks, so they start on Monday.\nAssistant: Noted."))

# -- tool trajectories whose fix is the lesson ---------------------------------------------------

for _args in TRAJECTORIES:
    _fam(*_args)

# -- corrections of the agent -------------------------------------------------------------------

for _args in CORRECTIONS:
    _fam(*_args)

# -- two lessons in one trace -----------------------------------------------------------------

TRACES.append(Trace("multi-1", "test", "convention", "note", "bob", "org", (),
                    "Two things for the record: amounts in payments are in cents, and all event timestamps are UTC.",
                    None, ("cents", "tz")))
TRACES.append(Trace("multi-2", "dev", "rule", "conversation", "alice", "group", ("finance",),
                    "User: remember that revenue is always reported in CHF. Also, the fiscal year starts in "
                    "February.\nAssistant: Both noted.", None, ("chf", "fy")))
TRACES.append(Trace("multi-3", "test", "fact", "conversation", "dave", "org", (),
                    "User: Priya Shah owns the billing dashboard. And the admin panel only works over the VPN.\n"
                    "Assistant: Thanks, noted both.", None, ("billing_owner", "vpn")))
TRACES.append(Trace("multi-4", "dev", "trajectory", "note", "carol", "org", (),
                    "Lessons from today's sync: the CRM API gives at most 100 records per page, and orders.cust_id "
                    "joins to crm_accounts.id.", None, ("page100", "custid")))

# -- chatter, meta talk and cue words without a lesson ------------------------------------------

for i, t in enumerate(CHATTER):
    kind, owner, vis, content = t[:4]
    outcome = t[4] if len(t) > 4 else None
    groups = USERS[owner][:1] if vis == "group" else ()
    TRACES.append(Trace(f"chat-{i + 1}", "dev" if i % 2 == 0 else "test", "chatter", kind, owner, vis, groups,
                        content, outcome, ()))


def split(name: str) -> list[Trace]:
    """``dev``, ``test``, ``all`` (dev + test), ``fresh`` (fresh.py: written after tuning, then used
    to fix generic faults) ``holdout`` / ``holdout2`` (written after the tuning rounds before them; see their docstrings)."""
    if name == "fresh":
        from bench.quality.distillation.fresh import FRESH

        return list(FRESH)
    if name == "holdout":
        from bench.quality.distillation.holdout import HOLDOUT

        return list(HOLDOUT)
    if name == "holdout2":
        from bench.quality.distillation.holdout2 import HOLDOUT2

        return list(HOLDOUT2)
    return [t for t in TRACES if name == "all" or t.split == name]


def _check() -> None:
    ids = [t.id for t in TRACES]
    assert len(ids) == len(set(ids)), "duplicate trace ids"
    for t in TRACES:
        for lid in t.lessons:
            assert LESSONS[lid].split == t.split, f"{t.id}: lesson {lid} is in another split"
        assert t.visibility in ("private", "group", "org") and (t.visibility != "group" or t.groups)


_check()
