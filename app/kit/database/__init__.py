"""What runs on PostgreSQL without knowing who asks: engines and sessions, where the server is,
migrations, replicas, the declarative base, shared SQL building blocks."""
