"""The demo job board's data: pure and deterministic from a seed (no I/O)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from crawlherd.errors import ConfigurationError

__all__ = ["DEFAULT_KEYWORDS", "DEFAULT_LOCATIONS", "DemoJob", "JobBoard"]

DEFAULT_KEYWORDS: tuple[str, ...] = ("python", "rust", "devops", "frontend", "data")
DEFAULT_LOCATIONS: tuple[str, ...] = ("berlin", "london", "paris", "remote")

_TITLES = {
    "python": ("Python Developer", "Backend Engineer (Python)", "Django Developer"),
    "rust": ("Rust Engineer", "Systems Programmer (Rust)", "Embedded Rust Developer"),
    "devops": ("DevOps Engineer", "Site Reliability Engineer", "Platform Engineer"),
    "frontend": ("Frontend Developer", "React Engineer", "UI Engineer"),
    "data": ("Data Engineer", "Data Scientist", "Analytics Engineer"),
}
_LEVELS = ("Junior", "", "Senior", "Lead", "Staff")
_COMPANIES = (
    "Acme Analytics",
    "Blue Fjord",
    "Copperleaf",
    "Driftwood Labs",
    "Ember & Oak",
    "Fieldstone",
    "Gridline",
    "Harbor Systems",
    "Ironbark",
    "Juniper Works",
)
_PERKS = (
    "flexible hours",
    "a yearly learning budget",
    "four-day weeks in summer",
    "a modern laptop of your choice",
    "remote-friendly teams",
    "pension contributions",
)


@dataclass(frozen=True, slots=True)
class DemoJob:
    """One job posting. ``keywords`` are the searches it matches; ``location`` is a location slug."""

    id: int
    title: str
    company: str
    location: str
    salary: str
    description: str
    keywords: tuple[str, ...]

    @property
    def location_name(self) -> str:
        """The location as pages show it (``Berlin``)."""
        return self.location.capitalize()

    @property
    def path(self) -> str:
        """The detail page's path (``/jobs/ID``)."""
        return f"/jobs/{self.id}"


class JobBoard:
    """The demo site's data: pure, deterministic from ``seed``.

    For each keyword x location a number of jobs between ``min_jobs`` and ``max_jobs`` is made; about
    one in five also matches a second keyword, so two searches can share a posting.
    """

    def __init__(
        self,
        *,
        seed: int = 42,
        keywords: Iterable[str] = DEFAULT_KEYWORDS,
        locations: Iterable[str] = DEFAULT_LOCATIONS,
        min_jobs: int = 6,
        max_jobs: int = 24,
    ) -> None:
        self.keywords = tuple(k.strip().lower() for k in keywords)
        self.locations = tuple(loc.strip().lower() for loc in locations)
        if not self.keywords or not self.locations:
            raise ConfigurationError("JobBoard needs at least one keyword and one location")
        for word in (*self.keywords, *self.locations):
            if not word or not word.replace("-", "").isalnum():
                raise ConfigurationError(f"JobBoard keyword/location {word!r}: use letters, digits and '-' only")
        if not 0 <= min_jobs <= max_jobs:
            raise ConfigurationError(f"JobBoard: need 0 <= min_jobs <= max_jobs, got {min_jobs}, {max_jobs}")
        self.seed = seed
        rng = random.Random(seed)
        jobs: list[DemoJob] = []
        for keyword in self.keywords:
            for location in self.locations:
                for _ in range(rng.randint(min_jobs, max_jobs)):
                    jobs.append(self._make_job(rng, 1000 + len(jobs), keyword, location))
        self.jobs: tuple[DemoJob, ...] = tuple(jobs)
        self._by_id = {job.id: job for job in jobs}

    def _make_job(self, rng: random.Random, job_id: int, keyword: str, location: str) -> DemoJob:
        matches = [keyword]
        if len(self.keywords) > 1 and rng.random() < 0.2:
            matches.append(rng.choice([k for k in self.keywords if k != keyword]))
        low = rng.randrange(35, 90) * 1000
        level = rng.choice(_LEVELS)
        role = rng.choice(_TITLES.get(keyword, (f"{keyword.capitalize()} Specialist",)))
        company = rng.choice(_COMPANIES)
        perks = ", ".join(rng.sample(_PERKS, 2))
        return DemoJob(
            id=job_id,
            title=f"{level} {role}".strip(),
            company=company,
            location=location,
            salary=f"EUR {low:,} - {low + rng.randrange(5, 30) * 1000:,}",
            description=(
                f"{company} is hiring in {location.capitalize()}. "
                f"You will work on {keyword} with a small team. We offer {perks}."
            ),
            keywords=tuple(matches),
        )

    def job(self, job_id: int) -> DemoJob | None:
        """The job with this id, or None."""
        return self._by_id.get(job_id)

    def search(self, keyword: str, location: str) -> list[DemoJob]:
        """Every job matching ``keyword`` in ``location`` (case-insensitive), in id order."""
        kw, loc = keyword.strip().lower(), location.strip().lower()
        return [job for job in self.jobs if kw in job.keywords and job.location == loc]

    def page(self, keyword: str, location: str, page: int, page_size: int) -> list[DemoJob]:
        """One 1-based page of :meth:`search`; empty past the end (and for page < 1)."""
        if page < 1:
            return []
        start = (page - 1) * page_size
        return self.search(keyword, location)[start : start + page_size]

    def page_count(self, keyword: str, location: str, page_size: int) -> int:
        """How many pages of ``page_size`` the search fills (0 when it finds nothing)."""
        return -(-len(self.search(keyword, location)) // page_size)
