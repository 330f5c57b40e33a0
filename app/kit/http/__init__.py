"""What only the HTTP process needs: request dependencies, body and rate limits, the read gate,
telemetry, Idempotency-Key replies, the list endpoints' keyset paging, the pydantic pieces every
body shares."""
