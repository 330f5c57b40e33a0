"""Lesson families of the distillation bench in which the user corrects the agent (a wrong rate,
name, date or limit): each entry is ``data._fam``'s arguments (id, keys, split, category, traces)."""

CORRECTIONS = [
    (
        "vat",
        ("8.1", "vat"),
        "test",
        "correction",
        (
            "conversation",
            "alice",
            "group",
            "Assistant: I applied Swiss VAT of 7.7%.\nUser: That's outdated. Swiss "
            "VAT is 8.1% since 2024.\nAssistant: Corrected.",
        ),
        ("feedback", "carol", "org", "The invoice draft used 7.7% VAT. Swiss VAT is 8.1% now."),
    ),
    (
        "cfo_name",
        ("lena vogt", "cfo"),
        "dev",
        "correction",
        (
            "conversation",
            "dave",
            "org",
            "Assistant: I sent the summary to Lena Vogel, the CFO.\nUser: Our CFO is Lena "
            "Vogt, not Vogel. Please resend.\nAssistant: Sorry, resent to Lena Vogt.",
        ),
        ("note", "alice", "org", "Our CFO is Lena Vogt (spelled V-o-g-t)."),
    ),
    (
        "sprint",
        ("two weeks|2 weeks|two-week|2-week", "sprint"),
        "test",
        "correction",
        (
            "conversation",
            "bob",
            "group",
            "Assistant: The sprint ends in three weeks.\nUser: Actually, sprints are two weeks long here, not three.",
            None,
            ("eng",),
        ),
        ("note", "carol", "group", "Our sprints run for 2 weeks, starting Wednesday.", None, ("eng",)),
    ),
    (
        "aug1",
        ("1 august|august 1|1st of august", "closed"),
        "dev",
        "correction",
        (
            "conversation",
            "alice",
            "org",
            "Assistant: I booked the client workshop for 1 August.\nUser: No, the office "
            "is closed on 1 August, it's the Swiss national holiday. Move it to the 2nd.",
        ),
        ("note", "carol", "org", "The office is closed on August 1 for the national holiday."),
    ),
    (
        "expense",
        ("500", "expense"),
        "test",
        "correction",
        (
            "conversation",
            "dave",
            "private",
            "Assistant: Expenses need manager approval above 1000 CHF.\nUser: That's "
            "wrong, the limit is 500 CHF. Expenses above 500 CHF need manager approval.",
        ),
        ("note", "alice", "org", "Expense claims above 500 CHF require manager approval."),
    ),
    (
        "weekly",
        ("monday", "status report|weekly report"),
        "dev",
        "correction",
        (
            "conversation",
            "carol",
            "private",
            "Assistant: Your weekly status report is due Friday.\nUser: no, weekly status reports are due Monday at 10:00.",
        ),
        ("note", "carol", "group", "Weekly status reports are due every Monday at 10:00.", None, ("finance",)),
    ),
]
