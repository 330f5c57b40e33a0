"""Who owns what a pipeline writes when no user asked for it: `app.orgs.service.job_owner`."""

from app.orgs.service import job_owner

__all__ = ["job_owner"]
