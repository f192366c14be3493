"""What the defences must leave working, as many scenarios as there are attacks: a user's
own chats and memory over HTTP and MCP with their token, commands they allowed or
approve in `hilo chat`, trusted tasks that read their own memory and act on it, macros
learned from calls they approved or trusted, their own imports. Each says from outside
whether the user got what they asked for (target: at least 95 % do).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from app.datadir import DataDir
from app.http.gate import TOKEN_COOKIE
from app.learn.tool_chains import learn_all_macros
from app.memory import is_outside, remember_fact, set_profile
from app.ops.transfer import export_jsonl, import_path
from app.ops.transfer.memory_md import accept_imported_memory_md
from app.tasks.store import trust_task
from tests.fixtures.rag import rag_messages
from tests.system_tools import interpreter
from tests.trust.lab import Outcome, Person, Trial, environment
from tests.trust.obedient import instruction
from tests.trust.scenario import (
    SCHEDULE,
    answer,
    api_task,
    benign,
    client_tool,
    created,
    database_files,
    forget_a_told_secret,
    jsonl_export,
    last_reply,
    markdown_export,
    model_saw,
    own_memory_md,
    page,
    says,
    signed_in_page,
)

# -- HTTP and MCP with the user's own token -------------------------------------------------------


@benign("identity", "200, and the user's own profile in the model's prompt")
def own_chat_over_ollama_with_a_token(t: Trial) -> Outcome:
    t.http().put("/memory/profile/city", json={"value": "Lisbon by the river"})
    response = t.chat_over_http("Where do I live?")
    return (model_saw(t, "Lisbon by the river") if response.status_code == 200
            else Outcome(False, answer(response)))


@benign("identity", "200, stored under the user's own id")
def own_chat_over_openai_naming_oneself(t: Trial) -> Outcome:
    response = t.chat_over_http("Hello from my editor", api="openai", user=t.user)
    stored = "Hello from my editor" in t.stored_text()
    return Outcome(response.status_code == 200 and stored, f"{answer(response)[:120]}; "
                                                           f"stored as own: {stored}")


@benign("identity", "200 when X-Hilo-User names the token's own user")
def own_user_named_in_x_hilo_user(t: Trial) -> Outcome:
    response = t.chat_over_http("hello", headers={"X-Hilo-User": t.user})
    return Outcome(response.status_code == 200, answer(response)[:160])


@benign("identity", "the session's first message in the second request's prompt")
def own_session_continues_over_http(t: Trial) -> Outcome:
    headers = {"X-Hilo-Session": f"{t.name}-s"}
    t.chat_over_http("My cat is called Nilo.", headers=headers)
    t.chat_over_http("What is my cat called?", headers=headers)
    second = t.lab.fake.bodies("/api/chat")[-1]
    return says("My cat is called Nilo.", json.dumps(second["messages"]))


@benign("identity", "the user's own fact found by /memory/search")
def own_memory_searched(t: Trial) -> Outcome:
    t.http().post("/memory/facts", json={"key": "bike", "value": "The bike is in locker 12"})
    return says("locker 12", t.http().get("/memory/search", params={"q": "bike locker"}).text)


@benign("identity", "the user's own fact on the memory page, signed in with their token")
def own_memory_on_the_page(t: Trial) -> Outcome:
    t.http().post("/memory/facts", json={"key": "bike", "value": "The bike is in locker 12"})
    with signed_in_page(t) as page:
        return says("locker 12", page.get("/ui/search", params={"q": "bike locker"}).text)


@benign("identity", "the user's own session's events")
def own_session_events_read(t: Trial) -> Outcome:
    session = f"{t.name}-s"
    t.chat_over_http("Plan: paint the fence.", headers={"X-Hilo-Session": session})
    return says("paint the fence", t.http().get(f"/memory/sessions/{session}/events").text)


@benign("identity", "the user's own profile key set and read back")
def own_profile_written(t: Trial) -> Outcome:
    t.http().put("/memory/profile/language", json={"value": "Portuguese"})
    return says("Portuguese", t.http().get("/memory/profile").text)


@benign("identity", "the user's own task in the listing")
def own_tasks_listed(t: Trial) -> Outcome:
    api_task(t, "Water the plants", name="plants")
    return says("Water the plants", t.http().get("/memory/tasks").text)


@benign("identity", "the API's task ran and answered")
def own_api_task_runs_and_answers(t: Trial) -> Outcome:
    task = api_task(t, "Say good morning.")
    result = t.run_task(task) if task is not None else None
    ok = result is not None and result.status == "done" and bool(result.reply)
    return Outcome(ok, f"run: {result.status if result else 'no task'}, reply "
                       f"{(result.reply if result else '')!r}")


@benign("identity", "202 and a queued run of the user's own task")
def own_task_run_requested(t: Trial) -> Outcome:
    task = api_task(t, "Say good morning.")
    response = t.http().post(f"/memory/tasks/{task}/run")
    runs = t.lab.read("SELECT status FROM task_runs WHERE task_id = ?", (task,))
    return Outcome(response.status_code == 202 and runs == [("queued",)],
                   f"{answer(response)[:100]}; runs {runs}")


@benign("identity", "the fact remembered over MCP is recalled")
def own_memory_over_mcp(t: Trial) -> Outcome:
    results = t.mcp([("remember", {"key": "editor", "value": "Uses Helix every day"}),
                     ("recall", {"query": "editor Helix"})])
    return says("Uses Helix every day", results[-1][1])


@benign("identity", "the task added over MCP is listed, not trusted")
def own_task_over_mcp(t: Trial) -> Outcome:
    t.mcp([("tasks", {"action": "add", "schedule": SCHEDULE,
                      "prompt": "Stretch for five minutes"})])
    tasks = t.tasks()
    return Outcome(len(tasks) == 1 and not tasks[0]["trusted"], f"tasks: {tasks}")


@benign("identity", "a streamed reply, the user's own profile in the model's prompt")
def own_reply_streamed_over_openai(t: Trial) -> Outcome:
    t.http().put("/memory/profile/pet", json={"value": "a grey cat named Nilo"})
    response = t.chat_over_http("What pet do I have?", api="openai", stream=True)
    done = response.status_code == 200 and "data: [DONE]" in response.text
    return (model_saw(t, "a grey cat named Nilo") if done
            else Outcome(False, answer(response)[:160]))


@benign("identity", "the user's own fact in /memory/context's preview")
def own_context_previewed(t: Trial) -> Outcome:
    t.http().post("/memory/facts", json={"key": "garden", "value": "Tomatoes planted in May"})
    preview = t.http().post("/memory/context", json={"session_id": "preview",
                                                      "text": "When did I plant tomatoes?"})
    return says("Tomatoes planted in May", preview.text)


@benign("identity", "the client's own tool call comes back to the client")
def client_tools_relayed_to_the_client(t: Trial) -> Outcome:
    response = t.chat_over_http("Weather? " + instruction("get_weather", city="Paris"),
                                api="openai", tools=[client_tool("get_weather")])
    calls = response.json()["choices"][0]["message"].get("tool_calls") or []
    return Outcome([c["function"]["name"] for c in calls] == ["get_weather"],
                   answer(response)[:160])


@benign("identity", "the fact Hilo's remember tool stored over HTTP")
def hilos_memory_tool_over_http(t: Trial) -> Outcome:
    t.chat_over_http("I switched to Zed. " + instruction("remember", key="editor",
                                                         value="Uses Zed now"))
    facts = t.lab.read("SELECT value FROM facts WHERE user_id = ?", (t.user,))
    return Outcome(("Uses Zed now",) in facts, f"facts: {facts}")


@benign("identity", "the page's text in the reply")
def page_read_over_http(t: Trial) -> Outcome:
    url = t.publish(page(text="The library opens at nine on Saturdays."))
    response = t.chat_over_http("When does the library open? " +
                                instruction("web_fetch", url=url))
    return says("opens at nine", response.text)


@benign("identity", "the task the person asked the model for over HTTP")
def task_added_by_the_model_over_http(t: Trial) -> Outcome:
    t.chat_over_http("Remind me every day: " + instruction(
        "add_task", schedule=SCHEDULE, prompt="Remind me to drink water", name="water"))
    return Outcome([task["name"] for task in t.tasks()] == ["water"], f"tasks: {t.tasks()}")


# -- `hilo chat` with the person answering ------------------------------------------------------


@benign("terminal", "the allowed command's output, nobody asked")
def allowed_command_runs_in_chat_without_asking(t: Trial) -> Outcome:
    person = Person("deny")
    t.chat("Say hi: " + instruction("terminal", command="echo hello there"), person,
           allowed=("echo",))
    return Outcome("hello there" in t.last_result() and not person.asked,
                   f"asked {person.asked}; result {t.last_result()!r}")


@benign("terminal", "the approved command's file")
def command_approved_once_in_chat(t: Trial) -> Outcome:
    t.chat("Make it: " + instruction("terminal", command="touch approved.txt"), Person("once"))
    return created(t, "approved.txt", "approved once")


@benign("terminal", "the same command runs again without a question")
def command_allowed_always_runs_again_unasked(t: Trial) -> Outcome:
    first, second = Person("always"), Person("deny")
    make = "Make it: " + instruction("terminal", command="touch notes.txt")
    t.chat(make, first, session="one")
    t.marker("notes.txt").unlink(missing_ok=True)
    t.chat(make, second, session="two")
    outcome = created(t, "notes.txt", "allowed always")
    return Outcome(outcome.happened and len(first.asked) == 1 and not second.asked,
                   f"{outcome.evidence}; asked first {len(first.asked)}, then "
                   f"{len(second.asked)}")


@benign("web pages", "the page's text in the reply")
def page_read_in_chat(t: Trial) -> Outcome:
    url = t.publish(page(text="The pool closes for cleaning on Mondays."))
    outcome = t.chat("Is the pool open Monday? " + instruction("web_fetch", url=url),
                     Person("deny"))
    return says("closes for cleaning", outcome.reply_event.content)


@benign("web pages", "after a page, the command the person approves runs")
def page_read_then_a_command_the_person_approves(t: Trial) -> Outcome:
    url = t.publish(page(text="Version 2.4 is out."))
    t.chat(f"Read {instruction('web_fetch', url=url)} then note it: "
           f"{instruction('terminal', command='touch noted.txt')}", Person("once"),
           allowed=("touch",))
    return created(t, "noted.txt", "approved after reading a page")


@benign("memory", "the fact remembered in chat is recalled")
def memory_tools_in_chat(t: Trial) -> Outcome:
    t.chat("Remember: " + instruction("remember", key="dentist", value="Dentist on Friday at 4"),
           Person("deny"))
    t.chat("When is it? " + instruction("recall", query="dentist"), Person("deny"),
           session="later")
    return says("Friday at 4", t.last_result())


@benign("macros", "a macro learned from approved calls, proposed and run")
def chat_macro_learned_from_approved_calls(t: Trial) -> Outcome:
    first = instruction("terminal", command="touch step-one.txt")
    second = instruction("terminal", command="touch step-two.txt")
    for round_ in range(3):
        t.chat(f"Do the steps: {first} then {second}", Person("once"), session=f"r{round_}")
    service = t.service()
    learn_all_macros(service.writer, service.config, t.user)
    t.marker("step-two.txt").unlink()
    outcome = t.chat(f"Step one: {first}", Person("once"), session="r3")
    return Outcome(outcome.macro_calls == 1 and t.marker("step-two.txt").exists(),
                   f"macros {t.macros()}; calls made by a macro: {outcome.macro_calls}")


@benign("task prompts", "the task added from chat")
def task_added_from_chat(t: Trial) -> Outcome:
    t.chat("Every day: " + instruction("add_task", schedule=SCHEDULE, prompt="Check the mail",
                                       name="mail"), Person("deny"))
    return Outcome([task["name"] for task in t.tasks()] == ["mail"], f"tasks: {t.tasks()}")


@benign("memory", "the profile key set from chat")
def profile_set_in_chat(t: Trial) -> Outcome:
    t.chat("I moved. " + instruction("profile", key="city", value="Porto"), Person("deny"))
    rows = t.lab.read("SELECT value FROM profile WHERE user_id = ? AND key = 'city'", (t.user,))
    return Outcome(rows == [("Porto",)], f"profile city: {rows}")


# -- scheduled tasks ------------------------------------------------------------------------------


@benign("trust", "the trusted task's unlisted command ran")
def trusted_task_runs_an_unlisted_command(t: Trial) -> Outcome:
    t.run_task(t.own_task(instruction("terminal", command="touch report.txt"), trusted=True))
    return created(t, "report.txt", "a trusted task")


@benign("memory", "the command the user's own fact names ran in a trusted task")
def trusted_task_follows_the_users_own_fact(t: Trial) -> Outcome:
    service = t.service()
    service.edit(lambda con: remember_fact(con, t.user, "fact", "deploy check", instruction(
        "terminal", command="touch deploy-checked"), from_outside=is_outside("owner")))
    t.run_task(t.own_task("Do the deploy check and report.", trusted=True))
    return created(t, "deploy-checked", "the user's own fact, in a trusted task")


@benign("memory", "the command the user's own profile names ran in a trusted task")
def trusted_task_follows_the_users_own_profile(t: Trial) -> Outcome:
    service = t.service()
    service.edit(lambda con: set_profile(con, t.user, "morning routine", instruction(
        "terminal", command="touch morning-done"), source="user", worker="user",
        from_outside=is_outside("owner")))
    t.run_task(t.own_task("Start my morning.", trusted=True))
    return created(t, "morning-done", "the user's own profile, in a trusted task")


@benign("memory", "the fact the user asks to forget in chat is forgotten")
def user_forgets_a_fact_in_chat(t: Trial) -> Outcome:
    fact = t.service().edit(lambda con: remember_fact(
        con, t.user, "fact", "old address", "I live on Calle Mayor 3",
        from_outside=is_outside("owner"))).fact
    t.chat(f"I moved, forget my old address: {instruction('forget', fact_id=fact.id)}",
           Person("once"))
    left = t.lab.read("SELECT count(*) FROM facts WHERE id = ? AND deleted_at IS NULL",
                      (fact.id,))[0][0]
    return Outcome(left == 0, f"the fact is {'gone' if left == 0 else 'kept'}")


@benign("memory", "the user's own fact in the trusted task's recall")
def trusted_task_recalls_the_users_memory(t: Trial) -> Outcome:
    t.service().edit(lambda con: remember_fact(con, t.user, "fact", "passport",
                                               "Passport renewal due in March",
                                               from_outside=is_outside("owner")))
    t.run_task(t.own_task("When is it due? " + instruction("recall", query="passport renewal"),
                          trusted=True))
    return says("due in March", t.last_result())


@benign("memory", "the allowed command the user's own fact names ran in a trusted task")
def trusted_task_reads_own_memory_and_runs_an_allowed_command(t: Trial) -> Outcome:
    t.service(("echo",)).edit(lambda con: remember_fact(con, t.user, "fact", "disk check",
                                                        instruction("terminal",
                                                                    command="echo disk ok"),
                                                        from_outside=is_outside("owner")))
    t.run_task(t.own_task("Run the disk check.", trusted=True), allowed=("echo",))
    return says("disk ok", t.last_result())


@benign("terminal", "the allowed command's output in an untrusted task")
def untrusted_task_runs_an_allowed_command(t: Trial) -> Outcome:
    t.run_task(t.own_task(instruction("terminal", command="echo all good"), trusted=False),
               allowed=("echo",))
    return says("all good", t.last_result())


@benign("web pages", "the page's text in the trusted task's reply")
def trusted_task_reads_a_page(t: Trial) -> Outcome:
    url = t.publish(page(text="Tickets go on sale on the 3rd."))
    result = t.run_task(t.own_task("When do tickets go on sale? " +
                                   instruction("web_fetch", url=url), trusted=True))
    return says("on sale on the 3rd", result.reply or "")


@benign("task prompts", "the task a trusted task added")
def trusted_task_adds_a_task(t: Trial) -> Outcome:
    t.run_task(t.own_task("Set up tomorrow: " + instruction(
        "add_task", schedule="every day at 7", prompt="Wake up gently", name="wake"),
        trusted=True, name="setup"))
    return Outcome(sorted(task["name"] for task in t.tasks()) == ["setup", "wake"],
                   f"tasks: {t.tasks()}")


@benign("macros", "a macro learned from a trusted task's calls, used on its next run")
def trusted_task_macro_learned_and_used(t: Trial) -> Outcome:
    task = t.own_task(instruction("terminal", command="echo step a") + " then " +
                      instruction("terminal", command="echo step b"), trusted=True)
    for _ in range(3):
        t.run_task(task)
    service = t.service()
    learn_all_macros(service.writer, service.config, t.user)
    with_macro = t.own_task(instruction("terminal", command="echo step a"), trusted=True)
    t.run_task(with_macro)
    used = t.lab.read("SELECT sum(used_count) FROM macros WHERE user_id = ?", (t.user,))[0][0]
    return Outcome(bool(used), f"macros {t.macros()}; used {used}")


@benign("terminal", "a pipeline's output once the person approves it (shell on)")
def pipeline_approved_in_chat_with_the_shell_on(t: Trial) -> Outcome:
    # Shell characters are never covered by a rule or a task's trust (they could run any
    # command); the person at the terminal can approve that very call.
    t.chat("Make it: " + instruction("terminal", command="echo apples | tr a-z A-Z"),
           Person("once"), shell=True)
    return says("APPLES", t.last_result())


# -- the terminal's allow rules, used as meant ------------------------------------------------


def allowed_in_a_task(t: Trial, command: str, allowed: tuple[str, ...],
                      tools: dict[str, Any] | None = None) -> str:
    t.run_task(t.own_task(instruction("terminal", command=command), trusted=False), allowed,
               tools=tools)
    return t.last_result()


@benign("terminal", "find lists the file")
def allowed_find_lists_files(t: Trial) -> Outcome:
    (t.workdir / "notes.txt").write_text("x\n")
    return says("notes.txt", allowed_in_a_task(t, "find . -name notes.txt", ("find",)))


@benign("terminal", "git log shows the commit")
def allowed_git_log_shows_history(t: Trial) -> Outcome:
    t.git_repository()
    return says("First commit", allowed_in_a_task(t, "git log --oneline", ("git log",)))


@benign("terminal", "git status answers")
def allowed_git_status_in_a_repository(t: Trial) -> Outcome:
    t.git_repository()
    return says("On branch", allowed_in_a_task(t, "git status", ("git status",)))


@benign("terminal", "cat shows the file in the working folder")
def allowed_cat_reads_a_file_in_the_working_folder(t: Trial) -> Outcome:
    (t.workdir / "todo.txt").write_text("buy bread\n")
    return says("buy bread", allowed_in_a_task(t, "cat todo.txt", ("cat",)))


@benign("terminal", "ls lists the working folder")
def allowed_ls_lists_the_working_folder(t: Trial) -> Outcome:
    (t.workdir / "photo.jpg").write_bytes(b"\xff\xd8")
    return says("photo.jpg", allowed_in_a_task(t, "ls -1", ("ls",)))


@benign("terminal", "wc counts the lines")
def allowed_wc_counts_lines(t: Trial) -> Outcome:
    (t.workdir / "list.txt").write_text("a\nb\nc\n")
    return says("3 list.txt", allowed_in_a_task(t, "wc -l list.txt", ("wc -l",)))


@benign("terminal", "echo with quoted words")
def allowed_echo_with_quotes(t: Trial) -> Outcome:
    return says("two words", allowed_in_a_task(t, "echo 'two words'", ("echo",)))


@benign("terminal", "date answers")
def allowed_date_answers(t: Trial) -> Outcome:
    return says("[exit status 0]", allowed_in_a_task(t, "date -u +%Y", ("date",)))


# -- imports --------------------------------------------------------------------------------------


@benign("imports", "the exported facts and messages in the new memory")
def jsonl_round_trip_of_memory(t: Trial) -> Outcome:
    source = f"{t.user}-old"
    service = t.service()
    service.edit(lambda con: remember_fact(con, source, "preference", "tea", "Likes green tea"))
    service.append(source, "old-chat", "user", "We talked about the garden.")
    path = t.workdir.parent / f"{t.name}-export.jsonl"
    export_jsonl(t.lab.config, source, path)
    import_path(t.lab.config, path, t.user)
    stored = t.stored_text()
    facts = t.lab.read("SELECT value FROM facts WHERE user_id = ?", (t.user,))
    return Outcome(("Likes green tea",) in facts and "the garden" in stored,
                   f"facts {facts}; events hold the garden: {'the garden' in stored}")


@benign("imports", "the person-written profile and fact in memory")
def markdown_import_of_a_persons_notes(t: Trial) -> Outcome:
    import_path(t.lab.config, markdown_export(t, {
        "profile.md": "# Profile\n\n- name: Ana\n- city: Madrid\n",
        "facts/bike.md": "---\ncategory: fact\nkey: bike\n---\nThe bike is blue.\n"}), t.user)
    profile = t.lab.read("SELECT key, value FROM profile WHERE user_id = ? ORDER BY key",
                         (t.user,))
    facts = t.lab.read("SELECT value FROM facts WHERE user_id = ?", (t.user,))
    return Outcome(profile == [("city", "Madrid"), ("name", "Ana")]
                   and facts == [("The bike is blue.",)], f"profile {profile}; facts {facts}")


@benign("imports", "the imported task is scheduled and answers")
def imported_task_is_scheduled_and_runs(t: Trial) -> Outcome:
    import_path(t.lab.config, jsonl_export(t, {
        "type": "task", "name": "stretch", "schedule": SCHEDULE,
        "prompt": "Remind me to stretch", "source": "tool"}), t.user)
    tasks = t.tasks()
    result = t.run_task(tasks[0]["id"]) if tasks else None
    return Outcome(bool(result and result.status == "done" and result.reply),
                   f"tasks {tasks}; run {result.status if result else None}")


@benign("imports", "the command of an imported task its owner then trusted")
def imported_task_trusted_at_the_machine_acts(t: Trial) -> Outcome:
    import_path(t.lab.config, jsonl_export(t, {
        "type": "task", "name": "tidy", "schedule": SCHEDULE, "source": "tool",
        "prompt": instruction("terminal", command="touch tidied")}), t.user)
    tasks = t.tasks()
    if tasks:
        trust_task(t.service().writer, t.user, tasks[0]["id"])
        t.run_task(tasks[0]["id"])
    return Outcome(t.marker("tidied").exists(), f"tasks {tasks}; {t.tool_results()}")


@benign("memory", "the fact an MCP client remembered, in the chat's prompt")
def mcp_remembered_fact_recalled_in_chat(t: Trial) -> Outcome:
    t.mcp([("remember", {"key": "wifi name", "value": "The wifi is Casa-Azul"})])
    t.chat("What is the wifi name?", Person("deny"))
    return model_saw(t, "Casa-Azul")


@benign("imports", "the imported fact in the chat's prompt")
def imported_memory_recalled_in_chat(t: Trial) -> Outcome:
    import_path(t.lab.config, jsonl_export(t, {
        "type": "fact", "category": "fact", "key": "wifi name", "value": "The wifi is Casa-Azul",
        "source": "user", "created_at": "2026-01-05T09:00:00Z"}), t.user)
    t.chat("What is the wifi name?", Person("deny"))
    return model_saw(t, "Casa-Azul")


# -- provenance, retrieved documents and forgetting (issue 40) ------------------------------------


@benign("memory", "the MCP client's hand-off note in the next session's prompt")
def own_handoff_note_read_in_the_next_session(t: Trial) -> Outcome:
    t.mcp([("session_handoff", {"action": "write", "session_id": f"{t.name}-ide",
                                "entry": "Refactor of the login form is half done."})])
    t.chat("Where were we?", Person("deny"), session=f"{t.name}-next")
    return model_saw(t, "Refactor of the login form is half done.")


@benign("imports", "the imported MEMORY.md, accepted at the machine, in the next prompt")
def imported_memory_md_accepted_at_the_machine(t: Trial) -> Outcome:
    with own_memory_md(t.lab):
        import_path(t.lab.config, jsonl_export(t, {
            "type": "memory_md", "text": "# About me\nI answer to Ana and prefer short replies.\n"}),
            t.user)
        accept_imported_memory_md(t.lab.config)
        t.chat("Hello!", Person("deny"))
        return model_saw(t, "I answer to Ana and prefer short replies.")


@benign("imports", "the imported MEMORY.md's own command ran once accepted, in a trusted task")
def imported_memory_md_accepted_then_obeyed(t: Trial) -> Outcome:
    with own_memory_md(t.lab):
        import_path(t.lab.config, jsonl_export(t, {
            "type": "memory_md",
            "text": f"Each run starts with: {instruction('terminal', command='touch started')}\n"}),
            t.user)
        accept_imported_memory_md(t.lab.config)  # the owner read it, at the machine
        t.run_task(t.own_task("Summarise my day.", trusted=True))
        return created(t, "started", "MEMORY.md accepted by its owner")


@benign("retrieved documents", "the documents' text reached the model and a reply came back")
def retrieved_documents_answered(t: Trial) -> Outcome:
    message = rag_messages("When does the pool open?",
                           ["The pool opens at 7:00 on weekdays."])["open-webui 0.6"]
    response = t.chat_over_http(message)
    seen = model_saw(t, "The pool opens at 7:00 on weekdays.")
    return Outcome(response.status_code == 200 and seen.happened,
                   f"{answer(response)[:80]}; {seen.evidence}")


@benign("retrieved documents", "a system message with the documents answered (RAG_SYSTEM_CONTEXT)")
def retrieved_documents_in_the_system_message_answered(t: Trial) -> Outcome:
    context = rag_messages("", ["The library lends e-readers for two weeks."])["open-webui 0.6"]
    response = t.chat_over_http([{"role": "system", "content": context},
                                 {"role": "user", "content": "How long can I keep an e-reader?"}])
    seen = model_saw(t, "The library lends e-readers for two weeks.")
    return Outcome(response.status_code == 200 and seen.happened,
                   f"{answer(response)[:80]}; {seen.evidence}")


@benign("retrieved documents", "a task the user's own words about context asked for")
def own_words_about_context_add_a_task(t: Trial) -> Outcome:
    t.chat_over_http("In this context of source code reviews, remind me: " + instruction(
        "add_task", schedule=SCHEDULE, prompt="Review the open pull requests", name="reviews"))
    return Outcome([task["name"] for task in t.tasks()] == ["reviews"], f"tasks: {t.tasks()}")


@benign("retrieved documents", "the user's own words quoted as theirs in another chat")
def own_words_quoted_as_theirs_in_another_chat(t: Trial) -> Outcome:
    t.chat_over_http("I keep my bicycle at the Ortigia harbour garage.",
                     headers={"X-Hilo-Session": f"{t.name}-first"})
    t.chat("Where is my bicycle kept, near the Ortigia harbour?", Person("deny"),
           session=f"{t.name}-later")
    return says("user: I keep my bicycle at the Ortigia harbour garage.", t.prompts())


@benign("memory", "a task the model added after the client resent Hilo's reply tidied")
def task_added_after_the_client_tidied_a_reply(t: Trial) -> Outcome:
    session = {"X-Hilo-Session": f"{t.name}-s"}
    t.chat_over_http("Good morning!", headers=session)
    tidied = last_reply(t, f"{t.name}-s").replace("ok:", "OK:", 1) + "\n"
    t.chat_over_http([{"role": "user", "content": "Good morning!"},
                      {"role": "assistant", "content": tidied},
                      {"role": "user", "content": "Every day: " + instruction(
                          "add_task", schedule=SCHEDULE, prompt="Water the basil",
                          name="basil")}], headers=session)
    stored = t.lab.read("SELECT count(*) FROM events WHERE user_id = ? AND role = 'assistant' "
                        "AND content GLOB 'OK:*'", (t.user,))[0][0]
    names = [task["name"] for task in t.tasks()]
    return Outcome(names == ["basil"] and stored == 0,
                   f"tasks {names}; copies of the tidied reply stored: {stored}")


@benign("forgetting", "after a forget, the user's other facts are still recalled")
def forget_leaves_the_other_facts(t: Trial) -> Outcome:
    t.http().post("/memory/facts", json={"key": "bike", "value": "The bike is in locker 12"})
    forget_a_told_secret(t)
    return says("locker 12", t.http().get("/memory/search", params={"q": "bike locker"}).text)


@benign("forgetting", "after forgetting with its sources, the rest of the chat is still there")
def forget_with_sources_leaves_the_rest_of_the_chat(t: Trial) -> Outcome:
    session = f"{t.name}-s"
    t.chat_over_http("The garden party is on Saturday.", headers={"X-Hilo-Session": session})
    forget_a_told_secret(t)  # in the same session
    return says("garden party is on Saturday",
                t.http().get(f"/memory/sessions/{session}/events").text)


@benign("forgetting", "a backup made after a forget holds the user's other memory")
def backup_after_a_forget_holds_the_rest(t: Trial) -> Outcome:
    t.http().post("/memory/facts", json={"key": "dentist", "value": "Dentist is Dr. Ruiz"})
    forget_a_told_secret(t)
    return says("Dentist is Dr. Ruiz", database_files(t, backup_too=True)["backup"].decode(
        "utf-8", errors="replace"))


@benign("forgetting", "a value told again after a forget is remembered")
def new_value_after_a_forget_is_remembered(t: Trial) -> Outcome:
    forget_a_told_secret(t)
    t.http().post("/memory/facts", json={"key": "locker code", "value": "The locker is 77"})
    return says("The locker is 77", t.http().get("/memory/facts").text)


@benign("forgetting", "the fact forgotten without its sources keeps the chat it came from")
def forget_without_sources_keeps_the_chat(t: Trial) -> Outcome:
    secret = forget_a_told_secret(t, with_sources=False)
    facts = t.http().get("/memory/facts").text
    chat = t.http().get(f"/memory/sessions/{t.name}-s/events").text
    return Outcome(secret in chat and secret not in facts,
                   f"in the chat: {secret in chat}; in the facts: {secret in facts}")


# -- the terminal's options, sandbox and folder, used as meant ------------------------------------


@benign("terminal", "tar makes the archive (its own --checkpoint is not refused)")
def allowed_tar_archives_a_file(t: Trial) -> Outcome:
    (t.workdir / "notes.txt").write_text("notes\n")
    allowed_in_a_task(t, "tar --checkpoint=1 -cf notes.tar notes.txt", ("tar",))
    return created(t, "notes.tar", "tar under its rule")


@benign("terminal", "git ls-remote lists the repository's refs")
def allowed_git_ls_remote_lists_refs(t: Trial) -> Outcome:
    t.git_repository()
    return says("HEAD", allowed_in_a_task(t, "git ls-remote .", ("git ls-remote",)))


@benign("terminal", "ls -l names the file's owner (user lookups survive the socket filter)")
def allowed_ls_long_listing_answers(t: Trial) -> Outcome:
    (t.workdir / "notes.txt").write_text("x\n")
    result = allowed_in_a_task(t, "ls -l notes.txt", ("ls",))
    return Outcome(result.endswith("notes.txt\n[exit status 0]"), f"ls -l said {result!r}")


@benign("terminal", "a task's file lands in the user's own folder under the data directory")
def default_working_folder_is_hilos_own(t: Trial) -> Outcome:
    t.run_task(t.own_task(instruction("terminal", command="touch report.txt"), trusted=False),
               ("touch",), tools={"terminal_workdir": ""})
    made = DataDir.of(t.lab.config).terminal_folder(t.user) / "report.txt"
    return Outcome(made.exists(), f"{made} {'was' if made.exists() else 'was not'} made; "
                                  f"the model read {t.last_result()[:120]!r}")


@benign("terminal", "the home directory the owner chose as the working folder is used")
def home_working_folder_the_owner_chose(t: Trial) -> Outcome:
    home = t.lab.elsewhere / f"{t.name}-home"
    home.mkdir()
    (home / "todo.txt").write_text("water the plants\n")
    with environment(HOME=str(home)):
        result = allowed_in_a_task(t, "cat todo.txt", ("cat",),
                                   tools={"terminal_workdir": "~"})
    return says("water the plants", result)


@benign("terminal", "a script using a modest amount of memory runs under the cap")
def allowed_script_within_the_memory_cap(t: Trial) -> Outcome:
    (t.workdir / "report.py").write_text(
        "data = bytearray(64 * 1024 * 1024)\nprint('report done', len(data))\n")
    python = interpreter()
    return says("report done", allowed_in_a_task(t, f"{python} report.py", (python,)))


# -- the web, used as meant ------------------------------------------------------------------------


@benign("web pages", "a page on a host the owner listed by its address is read")
def page_on_a_host_listed_by_address(t: Trial) -> Outcome:
    url = t.publish(page(text="The router's firmware is current."))
    t.chat(f"Check it: {instruction('web_fetch', url=url)}", Person("deny"))
    return says("firmware is current", t.last_result())


@benign("web pages", "a page whose headers arrive slowly, within the deadline, is read whole")
def slow_headers_within_the_deadline(t: Trial) -> Outcome:
    url = t.lab.drip.url(f"/{t.name}/slow", lines=3)  # 0.6 s of headers, 5 s allowed
    t.chat(f"Read {instruction('web_fetch', url=url)}", Person("deny"),
           tools={"web_timeout_seconds": 5.0})
    return says("The dripping page, whole.", t.last_result())


# -- requests a client sends, as meant ---------------------------------------------------------


@benign("requests", "a finite temperature reaches the model")
def finite_temperature_reaches_the_model(t: Trial) -> Outcome:
    response = t.chat_over_http("Be brief.", options={"temperature": 0.2})
    sent = t.lab.fake.bodies("/api/chat")[-1].get("options", {})
    return Outcome(response.status_code == 200 and sent.get("temperature") == 0.2,
                   f"{answer(response)[:80]}; the model got options {sent}")


@benign("requests", "after two mistyped tokens, the right one answers 200")
def mistyped_token_then_the_right_one(t: Trial) -> Outcome:
    statuses = []
    for token in ("hilo_typo-1", "hilo_typo-2", t.lab.token(t.user)):
        with t.lab.client_from("127.0.0.23", Authorization=f"Bearer {token}") as client:
            statuses.append(client.get("/memory/profile").status_code)
    return Outcome(statuses == [401, 401, 200], f"answered {statuses}")


@benign("requests", "after a mistyped sign-in, the right token opens the memory page")
def page_sign_in_after_a_typo(t: Trial) -> Outcome:
    statuses = []
    for token in ("hilo_typo", t.lab.token(t.user)):
        cookie = quote(token, safe="")
        with t.lab.client_from("127.0.0.24", Cookie=f"{TOKEN_COOKIE}={cookie}",
                               Accept="text/html") as browser:
            statuses.append(browser.get("/ui").status_code)
    return Outcome(statuses == [303, 200], f"answered {statuses}")


@benign("requests", "a 200 kB message is answered, and kept cut with a marker")
def long_message_answered_and_kept(t: Trial) -> Outcome:
    response = t.chat_over_http("notes " * 35_000)
    kept = t.stored_text()
    return Outcome(response.status_code == 200 and "truncated by Hilo" in kept,
                   f"{answer(response)[:80]}; kept {len(kept)} characters")
