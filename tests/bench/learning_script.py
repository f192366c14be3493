"""The learning bench's conversations (tests/bench/learning.py): six people, each talking
to a local assistant about their own life or work, stating facts the way people do —
some plainly, some in passing, some taken back a few turns later ("actually we moved
the launch to Friday").

Each fact says what a stored memory about it must hold to count: `about` names the
subject (a stored item mentioning any of these words is about it), `value` the words
the current value holds (all of them; `a|b` accepts either), and `stale` the words of
a value the person took back. A word matches at a word's start, so "allerg" matches
"allergic" and "allergy". Development data, written for the bench, never tuned on a
model's output.

`model_reply` is the fake model server's side: scripted chat replies, and, asked for
JSON, what a capable model extracts from the USER lines it is shown (`extract`, per
turn), with the keys a model would choose — a change of mind does not always reuse
the earlier key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.bench.localmodel_script import _schema_properties
from tests.fake_ollama import learning_sources


@dataclass(frozen=True)
class Fact:
    name: str
    about: tuple[str, ...]
    value: tuple[str, ...]
    stale: tuple[str, ...] = ()


@dataclass(frozen=True)
class Turn:
    user: str
    reply: str
    extract: tuple[tuple[str, str, str], ...] = ()  # (category, key, value); "profile" → profile
    states: tuple[str, ...] = ()  # names of the facts the turn states or changes


@dataclass(frozen=True)
class Conversation:
    user: str  # the Hilo user (X-Hilo-User) the conversation belongs to
    facts: tuple[Fact, ...]
    turns: tuple[Turn, ...]


CONVERSATIONS: tuple[Conversation, ...] = (
    Conversation(
        user="lena",
        facts=(
            Fact("name", ("name",), ("lena",)),
            Fact("moving to", ("rotterdam", "move", "moving", "relocat"), ("rotterdam",)),
            Fact("movers date", ("movers", "moving date", "move date", "moving day"),
                 ("10",), stale=("3rd", "3 june", "june 3")),
            Fact("cat", ("cat", "miso", "pet"), ("cat", "miso")),
            Fact("floor", ("floor", "lift", "elevator"), ("fourth|4th",)),
            Fact("remote work", ("employer", "work", "job", "remote"), ("utrecht",)),
            Fact("allergy", ("allerg", "penicillin"), ("penicillin",)),
            Fact("internet", ("internet", "provider", "broadband", "ziggo"), ("ziggo",)),
        ),
        turns=(
            Turn("Hi! My name is Lena. I'm finally organising my move to Rotterdam.",
                 "Hi Lena! Happy to help with the move. Where would you like to start?",
                 (("profile", "name", "Lena"), ("fact", "move", "moving to Rotterdam")),
                 ("name", "moving to")),
            Turn("The movers are booked for the 3rd of June.",
                 "Good, that gives you a fixed date to plan backwards from.",
                 (("fact", "movers date", "3rd of June"),), ("movers date",)),
            Turn("What should I pack first?",
                 "Start with things you rarely use: books, off-season clothes, decorations."),
            Turn("I have a cat, Miso, who hates car rides.",
                 "Ask your vet about something calming for Miso on moving day.",
                 (("fact", "pet", "a cat named Miso who hates car rides"),), ("cat",)),
            Turn("Actually, the movers called. They can't do the 3rd, so it's now the 10th of June.",
                 "Noted, moving day is now the 10th of June.",
                 (("fact", "moving day", "10th of June"),), ("movers date",)),
            Turn("My new flat is on the fourth floor with no lift, which is why I need movers at all.",
                 "Fourth floor without a lift: ask the movers whether they bring a furniture hoist.",
                 (("fact", "new flat", "fourth floor, no lift"),), ("floor",)),
            Turn("I'll keep working remotely for my employer in Utrecht after the move.",
                 "Then a reliable internet connection from day one matters.",
                 (("fact", "work", "works remotely for an employer in Utrecht"),),
                 ("remote work",)),
            Turn("Quick aside, I'm allergic to penicillin, put that on the list for registering "
                 "with the new GP.",
                 "Added: mention the penicillin allergy when you register with a GP.",
                 (("fact", "allergy", "allergic to penicillin"),), ("allergy",)),
            Turn("Can you draft a checklist for changing my address?",
                 "Municipality registration, bank, insurance, employer, GP, subscriptions, post "
                 "forwarding."),
            Turn("Oh, and the internet provider will be Ziggo, installation on the 12th.",
                 "Ziggo on the 12th: two days after the move, so plan for mobile data meanwhile.",
                 (("fact", "internet provider", "Ziggo, installed on the 12th"),),
                 ("internet",)),
            Turn("Thanks, that's everything for today.", "Good luck with the packing, Lena!"),
        ),
    ),
    Conversation(
        user="ravi",
        facts=(
            Fact("name", ("name",), ("ravi",)),
            Fact("employer", ("paylark", "company", "employer"), ("paylark",)),
            Fact("role", ("role", "job", "team", "lead"), ("mobile",)),
            Fact("launch", ("launch", "release date"), ("friday",), stale=("thursday",)),
            Fact("backend", ("backend", "stack", "framework"), ("spring",), stale=("ktor",)),
            Fact("hosting", ("deploy", "hosting", "cloud"), ("cloud run",)),
            Fact("minimum android", ("minimum", "min sdk", "android version"), ("8",)),
            Fact("feedback style", ("feedback", "bullet"), ("bullet",)),
            Fact("crash reporting", ("sentry", "crash report", "error track", "monitoring"),
                 ("sentry",)),
            Fact("release manager", ("release manager", "joanna", "sign"), ("joanna",)),
        ),
        turns=(
            Turn("Morning. I'm Ravi, I lead the mobile team at a fintech called Paylark.",
                 "Morning Ravi. What's on the mobile team's plate today?",
                 (("profile", "name", "Ravi"), ("profile", "job", "leads the mobile team"),
                  ("fact", "employer", "Paylark, a fintech")), ("name", "role", "employer")),
            Turn("We're launching the new Android app on Thursday.",
                 "Exciting. Is the release build already in review?",
                 (("decision", "android app launch", "Thursday"),), ("launch",)),
            Turn("The backend is Kotlin with Ktor, and we deploy on Google Cloud Run.",
                 "A Ktor service on Cloud Run scales to zero nicely; watch the cold starts.",
                 (("fact", "backend stack", "Kotlin with Ktor"),
                  ("fact", "deployment", "Google Cloud Run")), ("backend", "hosting")),
            Turn("Can you review this release checklist for me? Store listing, screenshots, "
                 "privacy form, staged rollout.",
                 "Add a rollback plan and a check that the crash-free rate is watched during "
                 "the staged rollout."),
            Turn("Actually we moved the launch to Friday, QA found a crash on older Samsung phones.",
                 "Friday it is. Is the crash in a native library or in your own code?",
                 (("decision", "android app launch", "Friday"),), ("launch",)),
            Turn("Minimum Android version stays at 8.0.",
                 "Android 8.0 still covers almost every active device.",
                 (("decision", "minimum android version", "8.0"),), ("minimum android",)),
            Turn("I prefer feedback as bullet points, not paragraphs.",
                 "- Understood\n- Bullet points from now on",
                 (("preference", "feedback format", "bullet points, not paragraphs"),),
                 ("feedback style",)),
            Turn("Our crash reporting is Sentry; the free tier ran out last month so we're on "
                 "the Team plan now.",
                 "- Sentry Team plan\n- Set an alert on new issues in the release build",
                 (("fact", "crash reporting", "Sentry, Team plan"),), ("crash reporting",)),
            Turn("The release manager is Joanna, she signs off the store submission.",
                 "- Joanna signs off the store submission\n- Send her the checklist early",
                 (("fact", "release manager", "Joanna, signs off the store submission"),),
                 ("release manager",)),
            Turn("Hmm, scratch Ktor, we finished migrating the backend to Spring Boot last sprint.",
                 "- Backend: Kotlin on Spring Boot\n- Cloud Run unchanged",
                 (("fact", "backend framework", "Spring Boot (migrated from Ktor)"),),
                 ("backend",)),
            Turn("Ok, that's it, launch prep continues tomorrow.", "- Good luck with Friday's launch"),
        ),
    ),
    Conversation(
        user="marta",
        facts=(
            Fact("race", ("marathon", "race"), ("valencia",)),
            Fact("weekly volume", ("week", "km", "mileage", "volume"), ("25",)),
            Fact("knee", ("knee", "hill", "physio"), ("knee",)),
            Fact("diet", ("vegetarian", "diet", "meat"), ("vegetarian",)),
            Fact("goal", ("goal", "target", "finish time"), ("2:00|two hours|2 hours",),
                 stale=("1:50",)),
            Fact("app", ("strava", "app", "log"), ("strava",)),
            Fact("partner", ("tom", "partner"), ("tom",)),
            Fact("run time", ("6:30", "before work", "morning"), ("6:30",)),
        ),
        turns=(
            Turn("I'm training for the Valencia half marathon in December.",
                 "Great race, flat and fast. How many weeks do you have left?",
                 (("fact", "race", "Valencia half marathon in December"),), ("race",)),
            Turn("Right now I run three times a week, about 25 km in total.",
                 "25 km over three runs is a solid base for a half.",
                 (("fact", "weekly running", "three runs, about 25 km a week"),),
                 ("weekly volume",)),
            Turn("My physio said to avoid hill repeats until my left knee settles.",
                 "Then keep the quality sessions on the flat for now.",
                 (("fact", "knee", "left knee, no hill repeats for now (physio)"),), ("knee",)),
            Turn("What pace should I aim for on easy runs?",
                 "Conversational: you should be able to speak in full sentences."),
            Turn("I'm vegetarian, so protein ideas without meat please.",
                 "Lentils, tofu, eggs, Greek yogurt, tempeh and beans all work well.",
                 (("preference", "diet", "vegetarian"),), ("diet",)),
            Turn("My goal is under 1:50.",
                 "Under 1:50 means about 5:12 per kilometre.",
                 (("fact", "half marathon goal", "under 1:50"),), ("goal",)),
            Turn("I use Strava to log everything.",
                 "Strava's training log makes the weekly volume easy to follow.",
                 (("preference", "training log", "Strava"),), ("app",)),
            Turn("By the way my partner Tom is running the full marathon the same day.",
                 "Nice, you can travel to Valencia together.",
                 (("fact", "partner", "Tom, running the full marathon the same day"),),
                 ("partner",)),
            Turn("Let's be realistic and change the goal to finishing under two hours.",
                 "Under two hours is about 5:40 per kilometre; a kinder target with the knee.",
                 (("fact", "half marathon goal", "under two hours"),), ("goal",)),
            Turn("I usually run before work, around 6:30.",
                 "Early runs: keep a longer warm-up when it's cold.",
                 (("fact", "run time", "before work, around 6:30"),), ("run time",)),
            Turn("Thanks!", "Enjoy the training!"),
        ),
    ),
    Conversation(
        user="kofi",
        facts=(
            Fact("household", ("family", "household"), ("four|4",)),
            Fact("daughter allergy", ("ama", "daughter", "allerg", "peanut"), ("peanut",)),
            Fact("son dislikes", ("kwame", "mushroom", "son"), ("mushroom",)),
            Fact("shop", ("shop", "grocer", "supermarket"), ("albert heijn",),
                 stale=("lidl",)),
            Fact("hob", ("hob", "induction", "stove", "cook"), ("induction",)),
            Fact("budget", ("budget",), ("120",)),
            Fact("football", ("wednesday", "football", "practice"), ("17:30",)),
        ),
        turns=(
            Turn("Can you help me plan meals for the week? We're a family of four.",
                 "Of course. Any allergies or dislikes I should know about?",
                 (("fact", "household", "family of four"),), ("household",)),
            Turn("My daughter Ama is allergic to peanuts, so nothing with nuts.",
                 "No nuts at all, then. I'll check every recipe for them.",
                 (("fact", "daughter's allergy", "Ama is allergic to peanuts"),),
                 ("daughter allergy",)),
            Turn("My son Kwame won't eat mushrooms, but that's just taste.",
                 "Noted, mushrooms stay out or on the side.",
                 (("preference", "kwame", "does not eat mushrooms"),), ("son dislikes",)),
            Turn("We do the big shop at Lidl on Saturdays.",
                 "I'll keep the list to what Lidl usually stocks.",
                 (("fact", "grocery shopping", "Lidl on Saturdays"),), ("shop",)),
            Turn("I cook on an induction hob, so no wok recipes that need a gas flame.",
                 "Induction works with a flat-bottomed wok, but I'll avoid those recipes.",
                 (("fact", "hob", "induction"),), ("hob",)),
            Turn("Budget is around 120 euros a week for food.",
                 "120 euros for four is doable with some batch cooking.",
                 (("fact", "food budget", "about 120 euros a week"),), ("budget",)),
            Turn("What's a quick dinner with lentils?",
                 "Red lentil dal with rice: 25 minutes, cheap and nut-free."),
            Turn("We're switching to Albert Heijn delivery; Lidl is too far since the branch "
                 "near us closed.",
                 "Albert Heijn delivery it is; I'll use their product names.",
                 (("fact", "grocery shopping", "Albert Heijn delivery"),), ("shop",)),
            Turn("Remember that Wednesdays are football practice, dinner has to be ready by 17:30.",
                 "Wednesdays: dinner on the table by 17:30, so something quick.",
                 (("fact", "wednesday dinner", "ready by 17:30 for football practice"),),
                 ("football",)),
            Turn("Great, send me the list.", "Here it is, grouped by aisle."),
        ),
    ),
    Conversation(
        user="sofia",
        facts=(
            Fact("trip", ("toronto", "conference", "trip", "flight", "flying"),
                 ("toronto", "october|oct|14")),
            Fact("talk topic", ("talk", "kubecon", "speak", "present"), ("service mesh",)),
            Fact("talk date", ("talk",), ("17",), stale=("15",)),
            Fact("seat", ("seat", "aisle"), ("aisle",)),
            Fact("hotel", ("hotel",), ("chelsea",)),
            Fact("manager", ("manager", "chen"), ("chen",)),
            Fact("travel budget", ("budget",), ("2000|2,000|2k",)),
            Fact("gluten", ("gluten", "intoleran", "diet"), ("gluten",)),
            Fact("airline", ("air canada", "airline", "ac 849"), ("air canada|ac 849",)),
            Fact("airport transfer", ("train", "taxi", "airport"), ("train",)),
        ),
        turns=(
            Turn("I'm flying to Toronto for a conference on the 14th of October.",
                 "Toronto in October, lovely. Is it a work trip with a talk?",
                 (("fact", "trip", "Toronto, conference, flying on 14 October"),), ("trip",)),
            Turn("Yes, it's KubeCon; my talk on service meshes is on the 15th.",
                 "A talk the day after you land: leave time for jet lag.",
                 (("fact", "kubecon talk", "on service meshes, the 15th"),),
                 ("talk topic", "talk date")),
            Turn("I prefer aisle seats on long flights.",
                 "Aisle it is; I'll remind you when check-in opens.",
                 (("preference", "seat", "aisle on long flights"),), ("seat",)),
            Turn("My hotel is the Chelsea, near Yonge Street.",
                 "The Chelsea is a short walk from the convention centre's subway line.",
                 (("fact", "hotel", "the Chelsea, near Yonge Street"),), ("hotel",)),
            Turn("Actually I just got an email, they moved my talk to the 17th.",
                 "The 17th gives you two days to settle in. Better.",
                 (("fact", "talk date", "the 17th"),), ("talk date",)),
            Turn("My manager Chen approved the travel budget, up to 2000 dollars.",
                 "2000 dollars covers flight, hotel and meals for a week.",
                 (("fact", "manager", "Chen"), ("fact", "travel budget", "up to 2000 dollars")),
                 ("manager", "travel budget")),
            Turn("Can you draft an outline for the talk?",
                 "1. Why meshes 2. Sidecars vs ambient 3. What we measured 4. Lessons."),
            Turn("I'm gluten intolerant, so the conference dinner needs a note.",
                 "I'll draft a note to the organisers about a gluten-free meal.",
                 (("fact", "diet", "gluten intolerant"),), ("gluten",)),
            Turn("Flights are booked with Air Canada, AC 849.",
                 "AC 849 from London; keep the booking reference handy.",
                 (("fact", "flight", "Air Canada AC 849"),), ("airline",)),
            Turn("I'll take the train from the airport, not a taxi.",
                 "The UP Express takes 25 minutes to Union Station.",
                 (("preference", "airport transfer", "train, not a taxi"),),
                 ("airport transfer",)),
            Turn("That's all.", "Have a great trip!"),
        ),
    ),
    Conversation(
        user="jonas",
        facts=(
            Fact("language", ("japanese", "language"), ("japanese",)),
            Fact("flashcards", ("anki", "flashcard"), ("anki",)),
            Fact("exam", ("jlpt", "exam"), ("n3",), stale=("n4",)),
            Fact("teacher", ("teacher", "sensei", "sato"), ("sato",)),
            Fact("lessons", ("lesson",), ("thursday",), stale=("tuesday",)),
            Fact("city", ("hamburg", "live", "location", "city"), ("hamburg",)),
            Fact("reader", ("kindle", "graded reader"), ("kindle",)),
            Fact("job", ("nurse", "job", "work", "occupation", "profession"), ("nurse",)),
        ),
        turns=(
            Turn("I'm learning Japanese, about a year in, mostly with Anki.",
                 "A year of Anki is a good base. What level are you working towards?",
                 (("fact", "learning", "Japanese, about a year"),
                  ("fact", "study tool", "Anki")), ("language", "flashcards")),
            Turn("I'm aiming for JLPT N4 in July.",
                 "N4 in July is realistic after a year of steady study.",
                 (("decision", "jlpt", "N4 in July"),), ("exam",)),
            Turn("My teacher is Sato-sensei, lessons are on Tuesday evenings.",
                 "Tuesday lessons with Sato-sensei, good rhythm.",
                 (("fact", "teacher", "Sato-sensei"), ("fact", "lessons", "Tuesday evenings")),
                 ("teacher", "lessons")),
            Turn("What's a good way to learn kanji readings?",
                 "Learn readings in vocabulary, not alone: words anchor the readings."),
            Turn("I live in Hamburg, so finding a conversation partner is harder.",
                 "Hamburg has a Japanese community and tandem meetups worth a look.",
                 (("profile", "city", "Hamburg"),), ("city",)),
            Turn("I use a Kindle for graded readers.",
                 "Graded readers on a Kindle with the dictionary lookup work well.",
                 (("preference", "reading", "graded readers on a Kindle"),), ("reader",)),
            Turn("I think I'll go for N3 instead of N4, my teacher thinks I'm ready.",
                 "N3 is a big step up; grammar and reading speed will matter most.",
                 (("decision", "jlpt level", "N3"),), ("exam",)),
            Turn("Lessons move to Thursdays from next month.",
                 "Thursday evenings from next month, noted.",
                 (("fact", "lessons", "Thursday evenings from next month"),), ("lessons",)),
            Turn("I work as a nurse, so my study time is irregular with night shifts.",
                 "Short Anki sessions fit around shifts better than long blocks.",
                 (("profile", "job", "nurse, night shifts"),), ("job",)),
            Turn("Ok, thanks, that helps.", "Ganbatte!"),
        ),
    ),
)


def all_facts() -> list[tuple[str, Fact]]:
    """(user, fact) for every fact of every conversation."""
    return [(c.user, f) for c in CONVERSATIONS for f in c.facts]


# -- the fake model's side --------------------------------------------------------------------

_TURNS = {turn.user: turn for c in CONVERSATIONS for turn in c.turns}


def model_reply(body: dict) -> Any:
    """Scripted chat replies; asked for JSON, the scripted extraction of the user's lines
    the call shows or points at."""
    props = _schema_properties(body)
    if not props:
        users = [m for m in body.get("messages") or [] if isinstance(m, dict)
                 and m.get("role") == "user"]
        said = users[-1].get("content") if users else ""
        turn = _TURNS.get(said if isinstance(said, str) else "")
        return turn.reply if turn else "Sure."
    # What the call quotes, or points at in the chat it continues.
    said = [line for line in learning_sources(body) if line in _TURNS]
    reply: dict[str, Any] = {}
    if "facts" in props:
        items = [item for line in said for item in _TURNS[line].extract]
        reply["profile"] = {key: value for kind, key, value in items if kind == "profile"}
        reply["facts"] = [{"category": kind, "key": key, "value": value}
                          for kind, key, value in items if kind != "profile"]
    if "summary" in props:
        words = " ".join(said)[:240] or "small talk"
        # As a grammar-constrained server writes it: within the schema's bounds.
        reply["summary"] = f"The user talked about: {words}"[:props["summary"].get("maxLength")]
        reply["keywords"] = sorted({w.lower() for w in re.findall(r"[A-Za-z]{6,}", words)})[
            :props.get("keywords", {}).get("maxItems", 6)] \
            or ["conversation"]
    if "entry" in props:
        reply["entry"] = "The user planned ahead with the assistant."
    return reply or None
