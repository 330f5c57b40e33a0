"""Lesson families of the distillation bench told as tool trajectories whose fix is the lesson (a
failed call, then the working one): each entry is ``data._fam``'s arguments (id, keys, split,
category, traces)."""

TRAJECTORIES = [
    (
        "v2",
        ("v2", "invoice"),
        "test",
        "trajectory",
        (
            "trajectory",
            "bob",
            "org",
            "Task: fetch invoice 123\nTool: GET /api/invoices/123 -> 404 Not Found\n"
            "Agent: The invoices endpoint moved under /api/v2.\nTool: GET /api/v2/invoices/123 -> 200 OK",
            "success",
        ),
        ("note", "carol", "org", "Heads up: the invoices API now lives under /api/v2; the old path returns 404."),
    ),
    (
        "utf8",
        ("utf8|utf-8", "export"),
        "dev",
        "trajectory",
        (
            "trajectory",
            "alice",
            "private",
            "Task: export the customer list\nTool: export_csv(customers) -> file with "
            "broken umlauts\nAgent: The export needs the --encoding utf-8 flag.\nTool: export_csv(customers, --encoding "
            "utf-8) -> ok, umlauts fine",
            "success",
        ),
        (
            "conversation",
            "dave",
            "org",
            "User: remember that the customer export must be run with UTF-8 encoding or the umlauts break.\nAssistant: Noted.",
        ),
    ),
    (
        "token",
        ("token", "hour|60 min"),
        "test",
        "trajectory",
        (
            "trajectory",
            "bob",
            "group",
            "Task: nightly sync\nTool: sync_accounts() -> 401 Unauthorized after 65 min\n"
            "Agent: The access token expires after one hour, so the sync must refresh it.\nTool: refresh_token() -> ok\n"
            "Tool: sync_accounts() -> done",
            "success",
            ("eng",),
        ),
        ("note", "dave", "org", "Access tokens for the sync service expire after 60 minutes; refresh them in long jobs."),
    ),
    (
        "page100",
        ("100", "page"),
        "dev",
        "trajectory",
        (
            "trajectory",
            "carol",
            "org",
            "Task: list all CRM contacts\nTool: crm.list(page_size=500) -> 400 Bad Request: "
            "page_size too large\nAgent: The CRM API accepts at most 100 records per page.\nTool: crm.list(page_size=100) "
            "-> 100 contacts, next_page=2",
            "success",
        ),
        ("note", "bob", "org", "The CRM API returns at most 100 records per page; paginate."),
    ),
    (
        "etl",
        ("scheduler", "etl"),
        "test",
        "trajectory",
        (
            "trajectory",
            "dave",
            "org",
            "Task: fix stalled ETL\nTool: etl.status() -> stalled since 03:10\n"
            "Tool: etl.rerun(partition=yesterday) -> still stalled\nAgent: Restarting the scheduler pod first.\n"
            "Tool: k8s.restart(scheduler) -> ok\nTool: etl.rerun(partition=yesterday) -> success\nAgent: When the ETL "
            "job stalls, restart the scheduler pod before re-running the partition.",
            "success",
        ),
        (
            "note",
            "bob",
            "group",
            "Runbook: when the ETL stalls, restart the scheduler pod, then re-run yesterday's partition.",
            None,
            ("eng",),
        ),
    ),
    (
        "rollup",
        ("300", "rollup"),
        "dev",
        "trajectory",
        (
            "trajectory",
            "alice",
            "org",
            "Task: monthly rollup\nTool: wh.query(monthly_rollup) -> ERROR: statement "
            "timeout after 60s\nAgent: Retrying with a longer timeout.\nTool: wh.query(monthly_rollup, timeout=300) -> "
            "ok in 212s\nAgent: The monthly rollup needs a 300 second timeout.",
            "success",
        ),
        (
            "note",
            "bob",
            "group",
            "Remember: the monthly rollup query needs timeout=300, the default 60s is too short.",
            None,
            ("eng",),
        ),
    ),
    (
        "euwest",
        ("eu-west", "export"),
        "test",
        "trajectory",
        (
            "trajectory",
            "carol",
            "org",
            "Task: upload export\nTool: s3.put(bucket=us-exports, file=customers.csv) -> "
            "AccessDenied\nUser: customer exports must go to the eu-west bucket, data residency.\nTool: s3.put("
            "bucket=eu-west-exports, file=customers.csv) -> ok",
            "success",
        ),
        ("note", "dave", "org", "Use the eu-west bucket for customer exports; the us bucket is for analytics only."),
    ),
    (
        "sandbox",
        ("sandbox", "stripe|payment"),
        "dev",
        "trajectory",
        (
            "trajectory",
            "bob",
            "private",
            "Task: test refund flow\nTool: stripe.refund(live_key, ch_123) -> blocked by "
            "policy\nAgent: Payment tests must use the Stripe sandbox key.\nTool: stripe.refund(sandbox_key, ch_123) -> "
            "refunded",
            "success",
        ),
        (
            "conversation",
            "bob",
            "org",
            "User: never use live Stripe keys in tests, only the sandbox key.\nAssistant: Understood.",
        ),
    ),
]
