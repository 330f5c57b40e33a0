"""Chatter traces of the distillation bench: greetings, thanks, meta talk, transient status,
questions, general knowledge and cue words used without a lesson. Any memory made from them is a
false positive. Each: (kind, owner, visibility, content[, outcome])."""

CHATTER = [
    ("conversation", "alice", "org", "User: hi! how are you today?\nAssistant: I'm fine, thanks. How can I help?"),
    ("conversation", "bob", "private", "User: thanks, that worked!\nAssistant: Glad to help."),
    ("conversation", "carol", "private", "User: ok\nAssistant: Anything else?\nUser: no, bye"),
    ("conversation", "dave", "org", "Human: good morning team\nAI: Good morning! What can I do for you?"),
    ("conversation", "alice", "private", "User: what can you do?\nAssistant: I can search documents, run queries "
     "and draft emails."),
    ("conversation", "bob", "org", "User: can you summarise this chat for me?\nAssistant: We discussed the agenda "
     "for tomorrow's call."),
    ("conversation", "carol", "group", "User: lol that's hilarious\nAssistant: :)"),
    ("conversation", "dave", "private", "User: never mind, I found it myself.\nAssistant: Great!"),
    ("conversation", "alice", "org", "User: don't worry about it, thanks anyway!\nAssistant: No problem."),
    ("conversation", "bob", "private", "User: remember the offsite last year? good times\nAssistant: Sounds like it "
     "was fun!"),
    ("note", "carol", "org", "Heads up, I'm running 5 minutes late to the sync."),
    ("note", "dave", "org", "For the record, I think the demo went really well today!"),
    ("conversation", "alice", "private", "User: Should we always use the staging cluster for load tests?\n"
     "Assistant: That depends on the test size. What do you think?\nUser: not sure, let's discuss tomorrow."),
    ("conversation", "bob", "org", "User: is the VPN slow for anyone else?\nAssistant: I can't check network "
     "speed, sorry."),
    ("note", "carol", "org", "Lunch at noon? The new Thai place is open."),
    ("conversation", "dave", "private", "User: I'm out for lunch, back at 2.\nAssistant: Enjoy your lunch!"),
    ("conversation", "alice", "org", "User: What is the capital of Australia?\nAssistant: Canberra is the capital "
     "of Australia."),
    ("conversation", "bob", "private", "User: tell me a joke\nAssistant: Why did the database break up with the "
     "index? It felt constrained."),
    ("conversation", "carol", "private", "User: please rephrase this sentence to sound friendlier: 'send the file'\n"
     "Assistant: Could you please send me the file when you have a moment?"),
    ("trajectory", "dave", "org", "Task: check weather\nTool: weather(city=Zurich) -> 14°C, cloudy\nAgent: It is "
     "14°C and cloudy in Zurich.", "success"),
    ("trajectory", "alice", "private", "Task: count open tickets\nTool: tickets.count(status=open) -> 37\nAgent: "
     "There are 37 open tickets right now.", "success"),
    ("conversation", "bob", "org", "User: happy friday everyone!\nAssistant: Happy Friday!"),
    ("conversation", "carol", "org", "User: sorry, wrong chat\nAssistant: No worries."),
    ("conversation", "dave", "private", "User: hmm let me think about it\nAssistant: Take your time."),
    ("conversation", "alice", "group", "User: great job on the report yesterday\nAssistant: Thank you!"),
    ("note", "bob", "private", "TODO: buy milk, call the plumber."),
    ("conversation", "carol", "private", "User: can you translate 'good morning' into French?\nAssistant: Bonjour."),
    ("conversation", "dave", "org", "User: who won the match last night?\nAssistant: I don't have live sports "
     "results."),
    ("conversation", "alice", "private", "User: I always forget where I put my keys haha\nAssistant: That happens "
     "to everyone!"),
    ("conversation", "bob", "org", "User: please make it shorter\nAssistant: Sure, here is a shorter version: "
     "Meeting moved."),
    ("conversation", "carol", "org", "User: Never again am I ordering pizza from that place, it was cold.\n"
     "Assistant: Sorry to hear that!"),
    ("conversation", "dave", "org", "User: test\nAssistant: Test received."),
    ("trajectory", "alice", "org", "Task: send the agenda\nTool: email.send(to=team, subject=Agenda) -> sent\n"
     "Agent: Done, the agenda is out.", "success"),
    ("conversation", "bob", "private", "User: can you remind me what we talked about yesterday?\nAssistant: "
     "We talked about the roadmap draft."),
    ("conversation", "carol", "private", "User: ugh, mondays.\nAssistant: Hang in there!"),
    ("conversation", "dave", "private", "User: Please always be this fast, that was amazing\nAssistant: Thanks!"),
    ("note", "alice", "org", "Welcome to the team, Jonas! Drinks on Thursday."),
    ("conversation", "bob", "org", "User: the printer on floor 2 is jammed again\nAssistant: I'll let facilities "
     "know."),
    ("conversation", "carol", "group", "User: make sure you get some rest this weekend!\nAssistant: I'm an AI, "
     "but thank you!"),
    ("conversation", "dave", "org", "User: do you remember my name?\nAssistant: You are Dave."),
    ("trajectory", "bob", "private", "Task: ping service\nTool: http_get(/health) -> 200 OK\nAgent: The service is "
     "healthy.", "success"),
    ("conversation", "alice", "org", "User: what does the acronym ETL stand for?\nAssistant: Extract, transform, "
     "load."),
    ("conversation", "carol", "org", "User: is it going to rain tomorrow?\nAssistant: I can check the forecast if "
     "you like."),
    ("conversation", "dave", "org", "User: cool, see you next week\nAssistant: See you!"),
    ("feedback", "bob", "org", "Nice answer, thanks."),
    ("feedback", "alice", "private", "That was not helpful."),
    ("conversation", "alice", "org", "User: brb, coffee\nAssistant: Sure."),
    ("note", "dave", "private", "Interesting article on vector databases, read later."),
    ("conversation", "carol", "org", "User: you're the best, always so helpful\nAssistant: Happy to help!"),
    ("conversation", "bob", "org", "User: remind me tomorrow at 9 to call the bank\nAssistant: Reminder set for 9:00 tomorrow."),
]
