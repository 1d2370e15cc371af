// The log viewer in real headless Chromium, after a job whose Python driver ran a task that
// printed to stdout and stderr and left a detached actor that printed once and then goes on
// printing ticks. A task's, an actor's, a worker's and a job driver's logs are each a click
// from their pages. Screenshots go to $OXRAY_UI_SCREENSHOTS, else the OS's temporary folder.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkPython, Cluster, eventually, launchChromium, python, quote, shot, signedIn as signIn } from "./cluster.mjs";


const WORKLOAD = `
import sys
import threading
import time
import oxray

oxray.init()

@oxray.remote
def speak():
    print("speak says hello on stdout")
    print("speak warns on stderr", file=sys.stderr)
    return "spoken"

@oxray.remote
class Talker:
    def say(self):
        print("talker says hello on stdout")
        return "said"

    def tick(self):
        def loop():
            for i in range(100_000):
                print(f"talker tick {i}", flush=True)
                time.sleep(0.4)
        threading.Thread(target=loop, daemon=True).start()

print(oxray.get(speak.remote()))
talker = Talker.options(name="talker", lifetime="detached").remote()
print(oxray.get(talker.say.remote()))
oxray.get(talker.tick.remote())
print("driver says goodbye")
`;

let cluster;
let browser;
let jobId;
let job;
let speak;
let say;
let talker;

async function rows(kind, filters = "") {
  return (await cluster.api(`/api/v0/${kind}?detail=True&limit=10000${filters}`)).data.result.result;
}

before(async () => {
  checkPython();
  cluster = new Cluster().start();
  const script = join(cluster.dir, "workload.py");
  writeFileSync(script, WORKLOAD);
  jobId = await cluster.submit(`${quote(python)} ${quote(script)}`);
  job = await eventually("the workload job to end", async () => {
    const j = await cluster.api(`/api/jobs/${jobId}`);
    return ["SUCCEEDED", "FAILED", "STOPPED"].includes(j.status) && j;
  });
  const logs = (await cluster.api(`/api/jobs/${jobId}/logs`)).logs;
  assert.equal(job.status, "SUCCEEDED", `the workload job failed:\n${logs}`);

  const finished = (name) => eventually(`the finished ${name} task`, async () =>
    (await rows("tasks", `&filter_keys=name&filter_predicates=%3D&filter_values=${name}`)).find((t) => t.state === "FINISHED"));
  speak = await finished("speak");
  say = await finished("Talker.say");
  talker = await eventually("the talker actor", async () => (await rows("actors")).find((a) => a.name === "talker" && a.state === "ALIVE" && a.pid));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  cluster?.stop();
});

const signedIn = () => signIn(browser, cluster);


const visit = (page, hash) => page.evaluate((h) => { location.hash = h; }, hash);

const logText = (page) => page.textContent("#log-text");

// Waits until the viewer's text contains `line`.
const shows = (page, line) => page.waitForFunction((l) => document.getElementById("log-text")?.textContent.includes(l), line);

test("a task's page leads in one click to what the task printed, stdout and stderr", async () => {
  const page = await signedIn();
  await visit(page, `#/tasks/${speak.task_id}`);
  await page.waitForFunction((id) => document.getElementById("task-id")?.textContent === id, speak.task_id);
  await page.click(`.attempt[data-attempt='0'] a[href="#/logs?task_id=${speak.task_id}&attempt_number=0"]`);
  await shows(page, "speak says hello on stdout");
  assert.ok(!(await logText(page)).includes("speak warns on stderr"));
  assert.match(await page.textContent("#log-title"), /attempt 0 · stdout/);
  assert.equal(await page.getAttribute("nav a.active", "data-tab"), "tasks");
  await shot(page, "log-task");

  await page.click("#log-suffix a:has-text('stderr')");
  await page.waitForFunction(() => location.hash.includes("suffix=err"));
  await shows(page, "speak warns on stderr");
  assert.ok(!(await logText(page)).includes("speak says hello on stdout"));

  // An actor's tasks print into the actor's log: their page links there.
  await visit(page, `#/tasks/${say.task_id}`);
  await page.waitForFunction((id) => document.getElementById("task-id")?.textContent === id, say.task_id);
  assert.ok(await page.isVisible(`.attempt a[href="#/logs?actor_id=${talker.actor_id}"]`));
  assert.ok(await page.isVisible(`.attempt a[href="#/logs?actor_id=${talker.actor_id}&suffix=err"]`));
  await page.context().close();
});

test("an actor's stdout is a click from its page, and follows as the actor prints", async () => {
  const page = await signedIn();
  await visit(page, `#/actors/${talker.actor_id}`);
  await page.waitForFunction((id) => document.getElementById("actor-id")?.textContent === id, talker.actor_id);
  await page.click(`#actor-logs a[href="#/logs?actor_id=${talker.actor_id}"]`);
  await shows(page, "talker says hello on stdout");
  await shot(page, "log-actor");

  const lastTick = (text) => Math.max(-1, ...[...text.matchAll(/talker tick (\d+)/g)].map((m) => Number(m[1])));
  await page.check("#log-follow");
  await page.waitForFunction(() => location.hash.includes("follow=true"));
  await page.waitForFunction(() => document.getElementById("log-status").textContent.startsWith("following"));
  await shows(page, "talker says hello on stdout");
  const seen = lastTick(await logText(page));
  await page.waitForFunction((n) => {
    const ticks = [...document.getElementById("log-text").textContent.matchAll(/talker tick (\d+)/g)];
    return ticks.length && Number(ticks.at(-1)[1]) >= n + 2;
  }, seen, { timeout: 20_000 });
  await shot(page, "log-actor-follow");

  // Leaving the viewer ends its stream.
  const ended = page.waitForEvent("requestfailed", (r) => r.url().includes("/api/v0/logs/stream"));
  await page.click("nav a[data-tab=actors]");
  await ended;
  await page.context().close();
});

test("the node page lists its workers and log files, each leading to its log", async () => {
  const page = await signedIn();
  await visit(page, `#/nodes/${speak.node_id}`);
  const row = `#node-workers tr[data-pid="${speak.worker_pid}"]`;
  await page.waitForSelector(row);
  assert.match(await page.textContent(row), new RegExp(speak.worker_id));
  const file = `#node-log-files a[href="#/logs?node_id=${speak.node_id}&filename=worker-${speak.worker_id}.err"]`;
  await page.waitForSelector(file);
  assert.ok(await page.isVisible(`#node-log-files [data-group=worker_out] >> text=worker-${speak.worker_id}.out`));
  await shot(page, "node-logs");

  await page.click(`${row} a[href="#/logs?node_id=${speak.node_id}&pid=${speak.worker_pid}"]`);
  await shows(page, "speak says hello on stdout");
  assert.match(await page.textContent("#log-title"), new RegExp(`Worker pid ${speak.worker_pid} on node`));
  await page.goBack();
  await page.click(file);
  await shows(page, "speak warns on stderr");
  assert.equal(await page.isVisible("#log-suffix"), false, "a file has no stdout/stderr switch");

  // The driver ran on its own node, which lists its log.
  await visit(page, `#/nodes/${job.driver_node_id}`);
  await page.waitForSelector(`#node-log-files [data-group=driver] a[href="#/logs?node_id=${job.driver_node_id}&filename=job-driver-${jobId}.log"]`);
  await page.context().close();
});

test("a job's page leads to its driver's log, and a log the API cannot find says why", async () => {
  const page = await signedIn();
  await visit(page, `#/jobs/${jobId}`);
  await page.click("#driver-log a");
  await shows(page, "driver says goodbye");
  await page.click("#log-lines a:has-text('all')");
  await page.waitForFunction(() => location.hash.includes("lines=-1"));
  await shows(page, "driver says goodbye");
  assert.match(await page.textContent("#log-lines a.on"), /all/);
  await shot(page, "log-driver");

  await visit(page, `#/logs?task_id=${"f".repeat(32)}&attempt_number=0`);
  await page.waitForSelector("#log-error:not([hidden])");
  assert.match(await page.textContent("#log-error"), /Could not find log file for task attempt: f{32}\(0\)/);
  assert.equal(await page.isVisible("#log-text"), false);
  await shot(page, "log-error");
  await page.context().close();
});
