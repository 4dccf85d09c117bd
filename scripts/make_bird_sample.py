"""Generate the BIRD-format sample shipped in rlflow/assets/data/bird_sample (deterministic, offline).

    python scripts/make_bird_sample.py [--out rlflow/assets/data/bird_sample] [--seed 7] [--dev 400]

Writes ``train.json``, ``dev.json`` (BIRD's layout: a JSON list of objects with
``question_id``, ``db_id``, ``question``, ``evidence``, ``SQL``, ``difficulty``) and
``databases/<db_id>/<db_id>.sqlite``.

Design decisions:
- Five small databases of different domains, two or three tables each, a few dozen rows,
  with short table and column names so that one schema's CREATE TABLE text stays under
  ~400 characters: the sample is meant to be learnable by a tiny model trained from
  scratch on a CPU in minutes.
- Questions come from a handful of regular templates of graded difficulty (COUNT/WHERE,
  SELECT col WHERE, MAX/MIN/AVG, ORDER BY LIMIT, GROUP BY, one JOIN), instantiated from
  each table's declared label, categorical and numeric columns. Gold SQL stays short and
  uniform in shape (``T1``/``T2`` aliases in joins, as BIRD writes them).
- Every gold query is executed while generating: it must return rows, and ORDER BY LIMIT
  questions whose answer depends on a tie are discarded (the answer would be ambiguous).
- Train and dev are split by question, not by database, so dev databases are seen in training.
- Dev is a fifth of the sample, then more questions drawn from the answerable candidates the sample
  left unused, up to ``--dev`` (400: any accuracy on dev then has a standard error of at most 2.5
  points): each template in the sample's proportion where enough candidates are left (COUNT(*),
  MAX/MIN/AVG over a table, GROUP BY and ORDER BY LIMIT are nearly used up by the sample), the rest
  from other templates of the same difficulty, so the difficulty mix is the sample's; spread over
  the databases in turn. None shares its question text, or its gold query within a database, with
  another question. They come from a second generator seeded from ``--seed``, after the sample, so
  the train split stays as it was when dev held only its fifth (the shipped warm starts were
  trained on it).
- Everything flows from one ``random.Random(seed)``; the databases are written in one
  transaction and VACUUMed, so the same SQLite library writes the same bytes (the header
  records the library version, so another SQLite version gives different but equivalent files).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

FIRST = [
    "Ava",
    "Ben",
    "Cara",
    "Dan",
    "Eva",
    "Finn",
    "Gia",
    "Hugo",
    "Ivy",
    "Jack",
    "Kim",
    "Leo",
    "Mia",
    "Noah",
    "Olga",
    "Paul",
    "Rosa",
    "Sam",
    "Tara",
    "Umar",
    "Vera",
    "Will",
    "Yara",
    "Zoe",
]
LAST = [
    "Reed",
    "Cole",
    "Hart",
    "Lane",
    "Moss",
    "Page",
    "Ross",
    "Shaw",
    "Wade",
    "Fox",
    "Gray",
    "Hale",
    "Kerr",
    "Lowe",
    "Nash",
    "Pike",
    "Rowe",
    "Snow",
    "Tate",
    "Vale",
]
CITIES = ["Boston", "Denver", "Austin", "Seattle", "Miami", "Dallas", "Chicago", "Phoenix"]


@dataclass
class Table:
    """A table and how questions may talk about it."""

    name: str
    singular: str
    plural: str
    columns: list[tuple[str, str]]  # (name, SQL type); "id" first when present
    rows: list[tuple]
    label: str | None = None  # column naming one row (unique)
    label_phrase: str = "{v}"  # how a question names the row with label v
    cats: dict[str, tuple[str, str]] = field(default_factory=dict)  # col -> (plural predicate "are from {v}", noun)
    nums: dict[str, str] = field(default_factory=dict)  # col -> noun ("age")
    fks: dict[str, str] = field(default_factory=dict)  # col -> parent table


@dataclass
class Join:
    """Child rows linked to a parent row through ``child.fk = parent.id``."""

    child: str
    fk: str
    parent: str
    questions: list[tuple[str, str, bool]]  # (question with {p}, select expression, accepts a predicate phrase)
    reverse: str | None = None  # question with {c} (a child label) asking for the parent's label


def people(rng: random.Random, n: int) -> list[str]:
    pairs = [f"{first} {last}" for first in FIRST for last in LAST]
    return rng.sample(pairs, n)


def distinct_ints(rng: random.Random, lo: int, hi: int, n: int, step: int = 1) -> list[int]:
    return rng.sample(range(lo, hi + 1, step), n)


def concert_singer(rng: random.Random) -> tuple[list[Table], list[Join]]:
    names = people(rng, 30)
    countries = ["France", "Japan", "Brazil", "Canada", "Italy", "Spain"]
    ages = distinct_ints(rng, 18, 70, 30)
    singer = [(i + 1, names[i], rng.choice(countries), ages[i]) for i in range(30)]
    words1 = ["Blue", "Red", "Wild", "Calm", "Neon", "Gold", "Dark", "Pure"]
    words2 = ["Night", "Dream", "Road", "Wave", "Fire", "Sky"]
    titles = rng.sample([f"{a} {b}" for a in words1 for b in words2], 40)
    concert = [(i + 1, titles[i], rng.randint(2010, 2023), rng.randint(1, 30)) for i in range(40)]
    tables = [
        Table(
            "singer",
            "singer",
            "singers",
            [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("country", "TEXT"), ("age", "INTEGER")],
            singer,
            "name",
            cats={"country": ("are from {v}", "country")},
            nums={"age": "age"},
        ),
        Table(
            "concert",
            "concert",
            "concerts",
            [("id", "INTEGER PRIMARY KEY"), ("title", "TEXT"), ("year", "INTEGER"), ("singer_id", "INTEGER")],
            concert,
            "title",
            "the concert {v}",
            cats={"year": ("were held in {v}", "year")},
            fks={"singer_id": "singer"},
        ),
    ]
    joins = [
        Join(
            "concert",
            "singer_id",
            "singer",
            [
                ("How many concerts were given by {p}?", "COUNT(*)", True),
                ("List the titles of concerts given by {p}.", "T1.title", True),
            ],
            reverse="Which singer gave {c}?",
        )
    ]
    return tables, joins


def company(rng: random.Random) -> tuple[list[Table], list[Join]]:
    depts = ["Sales", "Finance", "Legal", "Research", "Support", "Design"]
    dept = [(i + 1, d, rng.choice(CITIES[:4])) for i, d in enumerate(depts)]
    names = people(rng, 40)
    salaries = distinct_ints(rng, 30000, 150000, 40, 1000)
    ages = [rng.randint(22, 64) for _ in range(40)]
    emp = [(i + 1, names[i], rng.randint(1, 6), salaries[i], ages[i]) for i in range(40)]
    tables = [
        Table(
            "dept",
            "department",
            "departments",
            [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("city", "TEXT")],
            dept,
            "name",
            "the {v} department",
            cats={"city": ("are in {v}", "city")},
        ),
        Table(
            "emp",
            "employee",
            "employees",
            [
                ("id", "INTEGER PRIMARY KEY"),
                ("name", "TEXT"),
                ("dept_id", "INTEGER"),
                ("salary", "INTEGER"),
                ("age", "INTEGER"),
            ],
            emp,
            "name",
            nums={"salary": "salary", "age": "age"},
            fks={"dept_id": "dept"},
        ),
    ]
    joins = [
        Join(
            "emp",
            "dept_id",
            "dept",
            [
                ("How many employees work in {p}?", "COUNT(*)", True),
                ("List the names of employees who work in {p}.", "T1.name", True),
                ("What is the average salary of employees who work in {p}?", "AVG(T1.salary)", True),
            ],
            reverse="Which department does {c} work in?",
        )
    ]
    return tables, joins


def school(rng: random.Random) -> tuple[list[Table], list[Join]]:
    names = people(rng, 35)
    majors = ["Math", "Physics", "History", "Biology", "Art"]
    student = [(i + 1, names[i], rng.choice(majors), rng.randint(18, 26)) for i in range(35)]
    titles = [
        "Algebra",
        "Poetry",
        "Genetics",
        "Optics",
        "Painting",
        "Statistics",
        "Ethics",
        "Chemistry",
        "Geology",
        "Drama",
    ]
    course = [(i + 1, t, rng.randint(2, 5)) for i, t in enumerate(titles)]
    pairs = rng.sample([(s, c) for s in range(1, 36) for c in range(1, 11)], 90)
    enroll = [(s, c, rng.randint(50, 100)) for s, c in sorted(pairs)]
    tables = [
        Table(
            "student",
            "student",
            "students",
            [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("major", "TEXT"), ("age", "INTEGER")],
            student,
            "name",
            cats={"major": ("major in {v}", "major")},
            nums={"age": "age"},
        ),
        Table(
            "course",
            "course",
            "courses",
            [("id", "INTEGER PRIMARY KEY"), ("title", "TEXT"), ("credits", "INTEGER")],
            course,
            "title",
            "the course {v}",
            nums={"credits": "number of credits"},
        ),
        Table(
            "enroll",
            "enrollment",
            "enrollments",
            [("student_id", "INTEGER"), ("course_id", "INTEGER"), ("grade", "INTEGER")],
            enroll,
            nums={"grade": "grade"},
            fks={"student_id": "student", "course_id": "course"},
        ),
    ]
    joins = [
        Join(
            "enroll",
            "course_id",
            "course",
            [
                ("How many students are enrolled in {p}?", "COUNT(*)", False),
                ("What is the average grade in {p}?", "AVG(T1.grade)", False),
                ("What is the highest grade in {p}?", "MAX(T1.grade)", False),
            ],
        ),
        Join(
            "enroll",
            "student_id",
            "student",
            [
                ("What is the average grade of {p}?", "AVG(T1.grade)", True),
                ("How many enrollments do {p} have?", "COUNT(*)", True),
            ],
        ),
    ]
    return tables, joins


def shop(rng: random.Random) -> tuple[list[Table], list[Join]]:
    goods = [
        "Lamp",
        "Kettle",
        "Puzzle",
        "Drone",
        "Novel",
        "Atlas",
        "Hammer",
        "Wrench",
        "Chess",
        "Kite",
        "Tea",
        "Honey",
        "Yoyo",
        "Drill",
        "Comic",
        "Dice",
        "Saw",
        "Jam",
        "Robot",
        "Diary",
        "Cards",
        "Rice",
        "Glue",
        "Ruler",
        "Blocks",
        "Map",
        "Pliers",
        "Cocoa",
        "Ball",
        "Poems",
    ]
    cats = ["Toys", "Books", "Games", "Tools", "Food"]
    prices = distinct_ints(rng, 5, 500, 30)
    product = [(i + 1, g, rng.choice(cats), prices[i]) for i, g in enumerate(goods)]
    orders = [(i + 1, rng.randint(1, 30), rng.randint(1, 10), rng.randint(2019, 2023)) for i in range(50)]
    tables = [
        Table(
            "product",
            "product",
            "products",
            [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("category", "TEXT"), ("price", "INTEGER")],
            product,
            "name",
            "the product {v}",
            cats={"category": ("are in the {v} category", "category")},
            nums={"price": "price"},
        ),
        Table(
            "orders",
            "order",
            "orders",
            [("id", "INTEGER PRIMARY KEY"), ("product_id", "INTEGER"), ("qty", "INTEGER"), ("year", "INTEGER")],
            orders,
            cats={"year": ("were placed in {v}", "year")},
            nums={"qty": "quantity"},
            fks={"product_id": "product"},
        ),
    ]
    joins = [
        Join(
            "orders",
            "product_id",
            "product",
            [
                ("How many orders were placed for {p}?", "COUNT(*)", True),
                ("What is the total quantity ordered for {p}?", "SUM(T1.qty)", True),
            ],
        )
    ]
    return tables, joins


def flights(rng: random.Random) -> tuple[list[Table], list[Join]]:
    airlines = ["SkyJet", "AeroOne", "BlueWing", "SunAir", "NorthFly", "Zephyr"]
    airline = [(i + 1, a, rng.choice(["USA", "Canada", "Mexico"])) for i, a in enumerate(airlines)]
    numbers = rng.sample(range(100, 1000), 40)
    dists = distinct_ints(rng, 200, 3000, 40, 10)
    prices = distinct_ints(rng, 50, 900, 40)
    flight = []
    for i in range(40):
        origin, dest = rng.sample(CITIES, 2)
        flight.append((i + 1, f"F{numbers[i]}", rng.randint(1, 6), origin, dest, dists[i], prices[i]))
    tables = [
        Table(
            "airline",
            "airline",
            "airlines",
            [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("country", "TEXT")],
            airline,
            "name",
            cats={"country": ("are from {v}", "country")},
        ),
        Table(
            "flight",
            "flight",
            "flights",
            [
                ("id", "INTEGER PRIMARY KEY"),
                ("no", "TEXT"),
                ("airline_id", "INTEGER"),
                ("origin", "TEXT"),
                ("dest", "TEXT"),
                ("dist", "INTEGER"),
                ("price", "INTEGER"),
            ],
            flight,
            "no",
            "flight {v}",
            cats={"origin": ("depart from {v}", "origin"), "dest": ("fly to {v}", "destination")},
            nums={"dist": "distance", "price": "price"},
            fks={"airline_id": "airline"},
        ),
    ]
    joins = [
        Join(
            "flight",
            "airline_id",
            "airline",
            [
                ("How many flights are operated by {p}?", "COUNT(*)", True),
                ("List the numbers of flights operated by {p}.", "T1.no", True),
                ("What is the average price of flights operated by {p}?", "AVG(T1.price)", True),
            ],
            reverse="Which airline operates {c}?",
        )
    ]
    return tables, joins


DATABASES = {"concert_singer": concert_singer, "company": company, "school": school, "shop": shop, "flights": flights}


# ---------------------------------------------------------------- questions

LABEL_NOUNS = {"name": "names", "title": "titles", "no": "numbers"}
AGGS = [("MAX", "highest"), ("MIN", "lowest"), ("AVG", "average")]


@dataclass
class Candidate:
    kind: str
    question: str
    sql: str
    evidence: str
    difficulty: str
    ranking: str = ""  # for ORDER BY ... LIMIT k: the ordered key values, k + 1 of them


def lit(value) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def values(t: Table, col: str) -> list:
    i = [c for c, _ in t.columns].index(col)
    return sorted({r[i] for r in t.rows})


def column(t: Table, col: str) -> list:
    i = [c for c, _ in t.columns].index(col)
    return [r[i] for r in t.rows]


def counting(t: Table):
    yield Candidate("count_all", f"How many {t.plural} are there?", f"SELECT COUNT(*) FROM {t.name}", "", "simple")
    for col, (pred, _) in t.cats.items():
        for v in values(t, col):
            where = f"{col} = {lit(v)}"
            yield Candidate(
                "count_cat",
                f"How many {t.plural} {pred.format(v=v)}?",
                f"SELECT COUNT(*) FROM {t.name} WHERE {where}",
                f"{v} refers to {where}",
                "simple",
            )
            if t.label:
                yield Candidate(
                    "list_cat",
                    f"List the {LABEL_NOUNS[t.label]} of {t.plural} that {pred.format(v=v)}.",
                    f"SELECT {t.label} FROM {t.name} WHERE {where}",
                    f"{v} refers to {where}",
                    "simple",
                )
    for col, noun in t.nums.items():
        for x in column(t, col)[:8]:
            for word, op in (("above", ">"), ("below", "<")):
                yield Candidate(
                    "count_num",
                    f"How many {t.plural} have {article(noun)} {noun} {word} {x}?",
                    f"SELECT COUNT(*) FROM {t.name} WHERE {col} {op} {x}",
                    f"{noun} {word} {x} refers to {col} {op} {x}",
                    "moderate",
                )


def lookups(t: Table):
    if not t.label:
        return
    asked = [c for c in [*t.nums, *t.cats] if c != t.label]
    for v in column(t, t.label):
        for col in asked:
            noun = t.nums.get(col) or t.cats[col][1]
            yield Candidate(
                "select",
                f"What is the {noun} of {t.label_phrase.format(v=v)}?",
                f"SELECT {col} FROM {t.name} WHERE {t.label} = {lit(v)}",
                "",
                "simple",
            )


def aggregates(t: Table):
    for col, noun in t.nums.items():
        for fn, word in AGGS:
            yield Candidate(
                "agg",
                f"What is the {word} {noun} of all {t.plural}?",
                f"SELECT {fn}({col}) FROM {t.name}",
                f"{word} {noun} refers to {fn}({col})",
                "simple",
            )
            for cat, (pred, _) in t.cats.items():
                for v in values(t, cat):
                    yield Candidate(
                        "agg_cat",
                        f"What is the {word} {noun} of {t.plural} that {pred.format(v=v)}?",
                        f"SELECT {fn}({col}) FROM {t.name} WHERE {cat} = {lit(v)}",
                        f"{word} {noun} refers to {fn}({col})",
                        "moderate",
                    )
            if t.label:
                order = "DESC" if fn == "MAX" else "ASC"
                if fn != "AVG":
                    tail = f"FROM {t.name} ORDER BY {col} {order} LIMIT"
                    yield Candidate(
                        "order",
                        f"Which {t.singular} has the {word} {noun}?",
                        f"SELECT {t.label} {tail} 1",
                        f"{word} {noun} refers to {fn}({col})",
                        "moderate",
                        f"SELECT {col} {tail} 2",
                    )
                    for k in (2, 3):
                        yield Candidate(
                            "order",
                            f"List the {LABEL_NOUNS[t.label]} of the {k} {t.plural} with the {word} {noun}.",
                            f"SELECT {t.label} {tail} {k}",
                            "",
                            "moderate",
                            f"SELECT {col} {tail} {k + 1}",
                        )
        for cat, (_, cat_noun) in t.cats.items():
            yield Candidate(
                "group",
                f"What is the average {noun} of {t.plural} for each {cat_noun}?",
                f"SELECT {cat}, AVG({col}) FROM {t.name} GROUP BY {cat}",
                "",
                "moderate",
            )
    for cat, (_, cat_noun) in t.cats.items():
        yield Candidate(
            "group",
            f"How many {t.plural} are there for each {cat_noun}?",
            f"SELECT {cat}, COUNT(*) FROM {t.name} GROUP BY {cat}",
            "",
            "moderate",
        )


def joined(j: Join, tables: dict[str, Table]):
    child, parent = tables[j.child], tables[j.parent]
    head = f"FROM {child.name} AS T1 JOIN {parent.name} AS T2 ON T1.{j.fk} = T2.id WHERE"
    for question, expr, by_pred in j.questions:
        for v in column(parent, parent.label):
            yield Candidate(
                "join",
                question.format(p=parent.label_phrase.format(v=v)),
                f"SELECT {expr} {head} T2.{parent.label} = {lit(v)}",
                f"{v} refers to {parent.name}.{parent.label} = {lit(v)}",
                "challenging",
            )
        for cat, (pred, _) in parent.cats.items() if by_pred else ():
            for v in values(parent, cat):
                yield Candidate(
                    "join",
                    question.format(p=f"{parent.plural} that {pred.format(v=v)}"),
                    f"SELECT {expr} {head} T2.{cat} = {lit(v)}",
                    f"{v} refers to {parent.name}.{cat} = {lit(v)}",
                    "challenging",
                )
    if j.reverse:
        for c in column(child, child.label):
            yield Candidate(
                "reverse",
                j.reverse.format(c=child.label_phrase.format(v=c)),
                f"SELECT T2.{parent.label} {head} T1.{child.label} = {lit(c)}",
                "",
                "challenging",
            )


QUOTAS = {
    "count_all": 3,
    "count_cat": 12,
    "list_cat": 8,
    "select": 16,
    "count_num": 10,
    "agg": 8,
    "agg_cat": 12,
    "order": 8,
    "group": 6,
    "join": 16,
    "reverse": 6,
}
PER_DB = 100
DEV_SIZE = 400  # dev questions in all: a standard error of at most 2.5 points on any accuracy


def answerable(conn: sqlite3.Connection, c: Candidate) -> bool:
    """Gold must return non-null rows; ORDER BY LIMIT k must not cut through a tie."""
    rows = conn.execute(c.sql).fetchall()
    if not rows or any(v is None for r in rows for v in r) or rows == [(0,)]:
        return False
    if c.ranking:
        ranked = conn.execute(c.ranking).fetchall()
        return len(ranked) < len(rows) + 1 or ranked[-2] != ranked[-1]
    return True


def pick(
    rng: random.Random, conn: sqlite3.Connection, candidates: list[Candidate]
) -> tuple[list[Candidate], list[Candidate]]:
    """The database's questions, by the quotas; and the answerable candidates left unused."""
    seen, by_kind = set(), {}
    for c in candidates:
        if c.question not in seen and answerable(conn, c):
            seen.add(c.question)
            by_kind.setdefault(c.kind, []).append(c)
    chosen, rest = [], []
    for kind in QUOTAS:
        pool = by_kind.get(kind, [])
        rng.shuffle(pool)
        chosen += pool[: QUOTAS[kind]]
        rest += pool[QUOTAS[kind] :]
    rng.shuffle(rest)
    fill = max(0, PER_DB - len(chosen))
    return chosen + rest[:fill], rest[fill:]


# ---------------------------------------------------------------- output


def create_sql(t: Table) -> str:
    cols = [f"{c} {kind} REFERENCES {t.fks[c]}(id)" if c in t.fks else f"{c} {kind}" for c, kind in t.columns]
    return f"CREATE TABLE {t.name} ({', '.join(cols)})"


def write_database(path: Path, tables: list[Table]) -> sqlite3.Connection:
    """Write one database in a single transaction, then VACUUM so the file layout is canonical."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for t in tables:
        conn.execute(create_sql(t))
        marks = ", ".join("?" * len(t.columns))
        conn.executemany(f"INSERT INTO {t.name} VALUES ({marks})", t.rows)
    conn.execute("COMMIT")
    conn.execute("VACUUM")
    return conn


def questions_for(
    rng: random.Random, conn: sqlite3.Connection, tables: list[Table], joins: list[Join]
) -> tuple[list[Candidate], list[Candidate]]:
    by_name = {t.name: t for t in tables}
    candidates = [c for t in tables for gen in (counting, lookups, aggregates) for c in gen(t)]
    candidates += [c for j in joins for c in joined(j, by_name)]
    return pick(rng, conn, candidates)


def item(rng: random.Random, db_id: str, c: Candidate) -> dict:
    # evidence is left empty for about a third of the questions, as in BIRD
    evidence = c.evidence if rng.random() < 0.65 else ""
    return {"db_id": db_id, "question": c.question, "evidence": evidence, "SQL": c.sql, "difficulty": c.difficulty}


def apportion(mix: Counter, count: int) -> dict[str, int]:
    """``count`` split in the proportions of ``mix`` (largest remainders)."""
    total = sum(mix.values())
    shares = {key: count * n / total for key, n in mix.items()}
    out = {key: int(share) for key, share in shares.items()}
    for key in sorted(shares, key=lambda k: out[k] - shares[k])[: count - sum(out.values())]:
        out[key] += 1
    return out


def more_dev(
    rng: random.Random, spare: dict[str, list[Candidate]], sample: list[tuple[str, Candidate]], count: int
) -> list[dict]:
    """``count`` dev questions beyond the sample, from the candidates it left unused: each template in the
    sample's proportion where enough are left, else other templates of the same difficulty; taken from the
    databases in turn. No two share a question text, nor a gold query in one database."""
    questions = {c.question for _, c in sample}
    queries = {(db_id, c.sql) for db_id, c in sample}
    pools = {db_id: rng.sample(spare[db_id], len(spare[db_id])) for db_id in DATABASES}
    extra = []

    def take(wanted: int, fits) -> int:
        queues = {db_id: [c for c in pool if fits(c)] for db_id, pool in pools.items()}
        got = 0
        while got < wanted and any(queues.values()):
            for db_id, queue in queues.items():
                while got < wanted and queue:
                    c = queue.pop()
                    pools[db_id].remove(c)
                    if c.question not in questions and (db_id, c.sql) not in queries:
                        questions.add(c.question)
                        queries.add((db_id, c.sql))
                        extra.append(item(rng, db_id, c))
                        got += 1
                        break
        return got

    difficulty = {c.kind: c.difficulty for _, c in sample}
    short = Counter()
    for kind, wanted in apportion(Counter(c.kind for _, c in sample), count).items():
        short[difficulty[kind]] += wanted - take(wanted, lambda c, kind=kind: c.kind == kind)
    for level, wanted in short.items():
        if take(wanted, lambda c, level=level: c.difficulty == level) < wanted:
            raise SystemExit(f"too few unused {level} questions for {count} more in dev: ask for a smaller --dev")
    return extra


def generate(out: Path, seed: int, dev: int = DEV_SIZE) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    items, sample, spare = [], [], {}
    for db_id, build in DATABASES.items():
        tables, joins = build(rng)
        conn = write_database(out / "databases" / db_id / f"{db_id}.sqlite", tables)
        try:
            chosen, spare[db_id] = questions_for(rng, conn, tables, joins)
            sample += [(db_id, c) for c in chosen]
            items += [item(rng, db_id, c) for c in chosen]
        finally:
            conn.close()
    rng.shuffle(items)
    n_dev = len(items) // 5
    order = list(DATABASES)

    def ordered(rows: list[dict]) -> list[dict]:
        return sorted(rows, key=lambda r: (order.index(r["db_id"]), r["question"]))

    # dev: the sample's fifth first, as it was shipped alone (so dev[:100] is that split, question ids
    # included, and the tokenizer is built from it), then the questions added after it
    more = more_dev(random.Random(f"{seed}/dev"), spare, sample, max(0, dev - n_dev))
    splits = {"dev": ordered(items[:n_dev]) + ordered(more), "train": ordered(items[n_dev:])}
    for name, rows in splits.items():
        splits[name] = [{"question_id": i, **r} for i, r in enumerate(rows)]
        (out / f"{name}.json").write_text(json.dumps(splits[name], indent=2) + "\n")
    return splits


def summary(splits: dict[str, list[dict]]) -> str:
    lines = []
    for name, rows in splits.items():
        sql = sorted(len(r["SQL"]) for r in rows)
        kinds = {d: sum(r["difficulty"] == d for r in rows) for d in ("simple", "moderate", "challenging")}
        dbs = {d: sum(r["db_id"] == d for r in rows) for d in DATABASES}
        lines.append(
            f"{name}: {len(rows)} questions, SQL chars median {sql[len(sql) // 2]} max {sql[-1]}, {kinds}, {dbs}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "rlflow" / "assets" / "data" / "bird_sample"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--dev", type=int, default=DEV_SIZE, help="dev questions in all (never fewer than the sample's fifth)"
    )
    args = parser.parse_args()
    print(summary(generate(args.out, args.seed, args.dev)))


if __name__ == "__main__":
    main()
