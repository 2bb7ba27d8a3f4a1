"""The proxy's other faces: the HTTP API (mnemo_api, seed-004 shaped events), a repository
onboarding driven through the proxy, `mnemo serve` as a process, and the newest user
message sent whole or refused. Same scripted provider and database as test_proxy.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid

import anthropic
import httpx2
import openai
import pytest
import test_proxy
from conftest import DSN, drain_jobs

from mnemosyne.proxy.scripted import Reply

# the scripted provider, its reset before each test and the proxy, as test_proxy.py has them
upstream = test_proxy.upstream
fresh_script = test_proxy.fresh_script
keyed_tenant = test_proxy.keyed_tenant
proxy = test_proxy.proxy
wait_messages = test_proxy.wait_messages


# ------------------------------------------------------------------------ the HTTP API
def mnemo_api(proxy, name: str, body: dict, status: int = 200) -> dict:
    # a trusted gateway names the tenant (test_edge.py: API keys)
    r = httpx2.post(f"{proxy.url}/mnemo/v1/{name}", json=body, timeout=60,
                    headers={"X-Mnemo-Tenant": body.get("tenant_id", "")})
    assert r.status_code == status, r.text
    return r.json()


def test_seed_004_http_api(db, tenant, proxy):
    ev = mnemo_api(proxy, "record_event", {
        "tenant_id": tenant, "session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "user"},
        "kind": "message", "sensitivity": "none", "tags": ["topic:onboarding"],
        "content": {"text": "what this project for?"}, "refs": []})
    assert ev["event_id"] and ev["message_id"]
    big = "# Demo\n" + "line of the readme\n" * 5000
    tr = mnemo_api(proxy, "record_event", {"tenant_id": tenant, "session_id": "s1", "kind": "tool_result",
                                           "content": {"tool": "fs.read_file", "path": "README.md", "text": big}})
    assert tr["session_id"] == ev["session_id"]  # "s1" names one session
    art = mnemo_api(proxy, "get_artifact", {"tenant_id": tenant, "artifact_id": tr["artifact_id"]})
    assert art["text"] == big
    mnemo_api(proxy, "record_event", {"tenant_id": tenant, "session_id": "s1", "kind": "decision",
                                      "content": {"decision": "Keep the README as the entry point",
                                                  "rationale": ["newcomers read it first"]}})
    decisions = mnemo_api(proxy, "query_decisions", {"tenant_id": tenant, "query": "README entry point"})
    assert decisions["decisions"][0]["decision"] == "Keep the README as the entry point"
    acb = mnemo_api(proxy, "build_acb", {"tenant_id": tenant, "session_id": "s1", "agent_id": "agentA",
                                         "channel": "private", "intent": "repo_onboarding",
                                         "query_text": "what this project for?", "max_tokens": 4000})
    assert acb["acb_id"].startswith("acb_") and acb["token_used_est"] <= 4000
    assert "recent_window" in [s["name"] for s in acb["sections"]]
    # errors in a shape of their own, with the project's code
    err = mnemo_api(proxy, "get_artifact", {"tenant_id": tenant, "artifact_id": 10**12}, status=404)
    assert err["error"]["code"] == "MN010"
    err = mnemo_api(proxy, "build_acb", {"tenant_id": tenant, "nonsense": 1}, status=400)
    assert err["error"]["code"] == "MN001"
    mnemo_api(proxy, "record_event", {"tenant_id": "no_such_" + uuid.uuid4().hex[:6], "session_id": "s1",
                                      "kind": "message", "content": {"text": "x"}}, status=404)


REPO = {
    "README.md": "# logslice\n\nlogslice is a command-line tool that slices large server log files by "
                 "time range and request id, so an on-call engineer can read one request's story.\n\n"
                 + "".join(f"## Flag {i}\n--from/--to take ISO timestamps; --request-id filters one "
                           f"request (example {i}).\n" for i in range(1200)),
    "package.json": '{"name": "logslice", "scripts": {"test": "jest", "start": "node src/cli.js"}}',
    "src/cli.js": "#!/usr/bin/env node\nrequire('./slice').main(process.argv)\n",
}


def run_tool(name: str, args: dict) -> str:
    if name == "fs_list_root":
        return "\n".join(sorted(REPO))
    if name == "fs_read_file":
        return REPO[args["path"]]
    return "\n".join(f"{p}:{line}" for p, text in REPO.items() for line in text.splitlines()
                     if args.get("pattern", "") in line)[:2000]


def test_repo_onboarding_through_the_proxy(db, tenant, proxy, upstream):
    """The repository-onboarding scenario: repo root -> "what is this project for?": every interaction stored,
    the large tool output as an excerpt plus an artifact, a decision recorded and cited,
    and a later conversation that gets the answer from memory."""
    assert len(REPO["README.md"].encode()) > 65536  # above the artifact threshold
    key = "onboard-" + uuid.uuid4().hex[:8]
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-x", max_retries=0,
                                 default_headers={"X-Mnemo-Tenant": tenant, "X-Mnemo-Session": key,
                                                  "X-Mnemo-Agent": "onboarder"})
    tools = [{"name": n, "description": n, "input_schema": {"type": "object"}}
             for n in ("fs_list_root", "fs_read_file", "fs_grep")]
    answer = ("logslice is a command-line tool that slices large server log files by time range and "
              "request id.")
    upstream.push(Reply(text="Let me look at the repository.", tool_calls=[("toolu_ls", "fs_list_root", {})]),
                  Reply(tool_calls=[("toolu_readme", "fs_read_file", {"path": "README.md"})]),
                  Reply(tool_calls=[("toolu_pkg", "fs_read_file", {"path": "package.json"}),
                                    ("toolu_grep", "fs_grep", {"pattern": "require"})]),
                  Reply(text=answer))
    messages: list[dict] = [{"role": "user", "content": "what is this project for?"}]
    for _ in range(6):
        with client.messages.stream(model="claude-scripted-1", max_tokens=2000, system="You onboard engineers.",
                                    tools=tools, messages=messages) as s:
            message = s.get_final_message()
        sid = s.response.headers["x-mnemo-session"]
        messages.append({"role": "assistant", "content": message.model_dump(mode="json", exclude_none=True)["content"]})
        if message.stop_reason != "tool_use":
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, b.input)}
            for b in message.content if b.type == "tool_use"]})
    assert message.content[-1].text == answer
    rows = wait_messages(db, tenant, sid, 9)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant", "tool", "assistant",
                                         "tool", "tool", "assistant"]
    # the README went in as an excerpt, its bytes as an artifact; later calls carried the excerpt
    readme = next(r for r in rows if r["role"] == "tool" and r["artifact_id"])
    assert len(readme["content"].encode()) < 16384
    full = mnemo_api(proxy, "get_artifact", {"tenant_id": tenant, "artifact_id": readme["artifact_id"]})
    assert full["text"] == REPO["README.md"]
    sent = json.dumps(upstream.requests[-1]["messages"])
    assert "logslice is a command-line tool" in sent and len(sent) < len(REPO["README.md"])
    # a decision, recorded over the HTTP API in the same session, and cited back
    ev = mnemo_api(proxy, "record_event", {
        "tenant_id": tenant, "session_id": key, "agent_id": "onboarder", "kind": "decision",
        "content": {"decision": "Onboarding docs start from the --from/--to flags",
                    "rationale": ["the README leads with time ranges"]}})
    assert ev["session_id"] == sid
    found = mnemo_api(proxy, "query_decisions", {"tenant_id": tenant, "query": "onboarding flags"})
    assert found["decisions"][0]["decision"] == "Onboarding docs start from the --from/--to flags"
    acb = mnemo_api(proxy, "build_acb", {"tenant_id": tenant, "session_id": key, "intent": "repo_onboarding",
                                         "query_text": "what is this project for?", "max_tokens": 6000})
    assert "logslice" in json.dumps(acb["sections"])
    # a new conversation about the project gets it from memory
    drain_jobs(db, tenant, 23)
    upstream.push(Reply(text="It slices logs."))
    client.messages.create(model="claude-scripted-1", max_tokens=500,
                           extra_headers={"X-Mnemo-Session": key + "-later"},
                           messages=[{"role": "user", "content": "Remind me: what does logslice do?"}])
    assert "slices large server log" in json.dumps(upstream.requests[-1].get("system"))


def test_mnemo_serve_runs_the_proxy(db, tenant, upstream):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mnemosyne.cli", "-d", DSN, "serve", "--port", str(port),
                             "--tenant", tenant, "--openai-base-url", upstream.url + "/v1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-x", max_retries=0)
        for _ in range(300):
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "served?"}])
                break
            except openai.APIConnectionError:
                time.sleep(0.1)
        assert raw.headers["x-mnemo-status"] == "managed"  # the tenant from --tenant
        assert raw.parse().choices[0].message.content == "Scripted answer."
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0]
    assert f"local single-user mode: requests without an API key act for tenant '{tenant}'" in output
    # a default tenant without a key is for one local user: not on a public address
    bad = subprocess.run([sys.executable, "-m", "mnemosyne.cli", "serve", "--host", "0.0.0.0", "--tenant", tenant],
                         check=False, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "--trusted-gateway" in bad.stderr and "mnemo keys create" in bad.stderr


def test_the_newest_user_message_goes_whole_or_the_call_is_refused(db, tenant, proxy, upstream):
    """A window too small for the question with the response reserve: 400 naming the
    window, the reserve and the message's size (the upstream got a stub of it)."""
    key = "small-" + uuid.uuid4().hex[:8]
    history = []
    for i in range(6):
        history += [{"role": "user", "content": f"Step {i}: " + "please look at the build log " * 30},
                    {"role": "assistant", "content": f"Done with step {i}. " + "All green. " * 30}]
    question = {"role": "user", "content": "Here is the failing test output, what broke? "
                + " ".join(f"line {i}: assertion failed in test_case_{i}" for i in range(60))}
    headers = {"X-Mnemo-Tenant": tenant, "X-Mnemo-Session": key, "X-Mnemo-Context-Window": "3000"}
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-x", max_retries=0, default_headers=headers)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="gpt-4o", messages=[*history, question])
    message = e.value.body["message"]
    assert "3000" in message and "4096" in message and "tokens" in message
    assert not upstream.requests  # nothing half-asked went upstream
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[*history, question],
                                                           max_tokens=400)
    assert raw.headers["x-mnemo-status"] == "managed"
    assert upstream.requests[-1]["messages"][-1] == question
