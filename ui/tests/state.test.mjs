// The actors, tasks and placement groups pages in real headless Chromium, after a job whose
// Python driver ran tasks (one of them failing), a detached named actor, an actor it killed
// and a detached placement group. The head keeps few ended tasks, so some are dropped and
// the pages say so. Screenshots go to $OXRAY_UI_SCREENSHOTS, else the OS's temporary folder.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkPython, Cluster, eventually, launchChromium, python, quote, shot, signedIn as signIn } from "./cluster.mjs";

// Ended task attempts the head keeps: the workload ends 12, so the 4 oldest squares go.
const MAX_ENDED_TASKS = 8;

const WORKLOAD = `
import time
import oxray
from oxray.util.placement_group import placement_group

oxray.init()

@oxray.remote
def square(x):
    return x * x

@oxray.remote(max_retries=0)
def explode():
    raise ValueError("boom from explode")

@oxray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n

print(oxray.get([square.remote(i) for i in range(6)]))
time.sleep(1.5)  # the squares reach the head first, and so are the oldest ended tasks
try:
    oxray.get(explode.remote())
except Exception as e:
    print("explode failed:", type(e).__name__)
keeper = Counter.options(name="keeper", lifetime="detached").remote()
print(oxray.get([keeper.incr.remote() for _ in range(2)]))
doomed = Counter.remote()
oxray.get(doomed.incr.remote())
oxray.kill(doomed)
group = placement_group([{"CPU": 0.25}], name="reserved", lifetime="detached")
oxray.get(group.ready())
print("workload done")
`;

let cluster;
let browser;
let jobId;
let keeper;
let doomed;
let failing;
let group;

async function rows(kind, filters = "") {
  return (await cluster.api(`/api/v0/${kind}?detail=True&limit=10000${filters}`)).data.result.result;
}

before(async () => {
  checkPython();
  cluster = new Cluster().start({ headArgs: ["--max-ended-tasks", String(MAX_ENDED_TASKS)] });
  const script = join(cluster.dir, "workload.py");
  writeFileSync(script, WORKLOAD);
  jobId = await cluster.submit(`${quote(python)} ${quote(script)}`);
  const job = await eventually("the workload job to end", async () => {
    const j = await cluster.api(`/api/jobs/${jobId}`);
    return ["SUCCEEDED", "FAILED", "STOPPED"].includes(j.status) && j;
  });
  const logs = (await cluster.api(`/api/jobs/${jobId}/logs`)).logs;
  assert.equal(job.status, "SUCCEEDED", `the workload job failed:\n${logs}`);

  [keeper, doomed] = await eventually("the actors", async () => {
    const actors = await rows("actors");
    const alive = actors.find((a) => a.name === "keeper" && a.state === "ALIVE");
    const dead = actors.find((a) => a.class_name === "Counter" && a.state === "DEAD");
    return alive && dead && [alive, dead];
  });
  failing = await eventually("the failing task", async () => (await rows("tasks", "&filter_keys=name&filter_predicates=%3D&filter_values=explode"))
    .find((t) => t.state === "FAILED"));
  group = await eventually("the placement group", async () => (await rows("placement_groups")).find((g) => g.name === "reserved" && g.state === "CREATED"));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  cluster?.stop();
});

const signedIn = () => signIn(browser, cluster);


test("the actors page lists the detached named actor alive and the killed one dead", async () => {
  const page = await signedIn();
  await page.click("nav a[data-tab=actors]");
  await page.waitForSelector(`tr[data-actor-id="${keeper.actor_id}"] .badge.s-ALIVE`);
  await page.waitForSelector(`tr[data-actor-id="${doomed.actor_id}"] .badge.s-DEAD`);
  assert.match(await page.textContent(`tr[data-actor-id="${keeper.actor_id}"]`), /Counter\s*keeper/);
  assert.match(await page.textContent("#actor-counts"), /ALIVE 1/);
  assert.match(await page.textContent("#actor-counts"), /DEAD 1/);
  await shot(page, "actors");

  // The named actor's page: its fields and its tasks, each linking to the task's page.
  await page.click(`tr[data-actor-id="${keeper.actor_id}"] a[href="#/actors/${keeper.actor_id}"]`);
  await page.waitForFunction((id) => document.getElementById("actor-id")?.textContent === id, keeper.actor_id);
  assert.ok(await page.isVisible("text=detached: outlives its job"));
  await page.waitForFunction(() => document.querySelectorAll("tr[data-task-id]").length === 3);
  const names = await page.$$eval("tr[data-task-id] td:nth-child(2)", (tds) => tds.map((td) => td.textContent).sort());
  assert.deepEqual(names, ["Counter.__init__", "Counter.incr", "Counter.incr"]);
  await shot(page, "actor");
  const incr = await page.getAttribute("tr[data-task-id]:has-text('Counter.incr') a", "href");
  await page.click(`a[href="${incr}"]`);
  await page.waitForFunction((id) => document.getElementById("task-id")?.textContent === id, incr.split("/").pop());
  assert.ok(await page.isVisible(`a[href="#/actors/${keeper.actor_id}"]`), "the task links back to its actor");

  // The killed actor says why it died.
  await page.evaluate((id) => { location.hash = `#/actors/${id}`; }, doomed.actor_id);
  await page.waitForSelector("#death-cause");
  assert.match(await page.textContent("#death-cause"), /killed/);
  await page.context().close();
});

test("the tasks page shows the summary, filters on the server and leads to the failing task's traceback", async () => {
  const page = await signedIn();
  await page.click("nav a[data-tab=tasks]");
  await page.waitForSelector(`tr[data-task-id="${failing.task_id}"] .badge.s-FAILED`);
  assert.match(await page.textContent('tr[data-function="explode"]'), /NORMAL_TASK\s*FAILED 1/);
  // The head kept the newest ended attempts, and says it dropped the others.
  assert.match(await page.textContent('tr[data-function="square"]'), /FINISHED 2/);
  assert.match(await page.textContent("#state-warnings"), /4 task attempts are not shown/);
  const all = await page.$$eval("tr[data-task-id]", (trs) => trs.length);
  assert.equal(all, MAX_ENDED_TASKS);
  // Newest first: the squares ended before everything else.
  const order = await page.$$eval("tr[data-task-id] td:nth-child(2)", (tds) => tds.map((td) => td.textContent));
  assert.deepEqual(order.slice(-2), ["square", "square"]);
  await shot(page, "tasks");

  await page.selectOption("#filter-state", "FAILED");
  await page.waitForFunction(() => location.hash === "#/tasks?state=FAILED");
  await page.waitForFunction(() => document.querySelectorAll("tr[data-task-id]").length === 1);
  assert.ok(await page.isVisible(`tr[data-task-id="${failing.task_id}"]`));
  assert.match(await page.textContent("h1"), /Tasks \(1 of 8\)/);
  await shot(page, "tasks-failed");

  // A refresh leaves a half-typed filter alone; Enter applies it, with the state still chosen.
  await page.fill("#filter-name", "squ");
  await page.waitForTimeout(2500);
  assert.equal(await page.inputValue("#filter-name"), "squ");
  await page.fill("#filter-name", "square");
  await page.press("#filter-name", "Enter");
  await page.waitForFunction(() => location.hash === "#/tasks?state=FAILED&name=square");
  await page.waitForSelector("text=No task matches these filters.");
  await page.click("text=Clear");
  await page.waitForFunction(() => location.hash === "#/tasks" && document.getElementById("filter-state").value === "");
  await page.fill("#filter-name", "square");
  await page.press("#filter-name", "Enter");
  await page.waitForFunction(() => location.hash === "#/tasks?name=square");
  await page.waitForFunction(() => document.querySelectorAll("tr[data-task-id]").length === 2);

  await page.evaluate(() => { location.hash = "#/tasks?state=FAILED"; });
  await page.click(`tr[data-task-id="${failing.task_id}"] a[href^="#/tasks/"]`);
  await page.waitForFunction((id) => document.getElementById("task-id")?.textContent === id, failing.task_id);
  const traceback = await page.textContent(".attempt[data-attempt='0'] pre.task-error");
  assert.match(traceback, /^Traceback \(most recent call last\):/);
  assert.match(traceback, /ValueError: boom from explode/);
  const states = await page.$$eval(".attempt[data-attempt='0'] tbody .badge", (els) => els.map((e) => e.textContent));
  assert.deepEqual(states.at(-1), "FAILED");
  assert.ok(states.includes("RUNNING"));
  assert.ok(await page.isVisible("text=TASK_EXECUTION_EXCEPTION"));
  assert.ok(await page.isVisible(`.attempt a[href="#/nodes/${failing.node_id}"]`));
  await shot(page, "task-failed");
  await page.context().close();
});

test("the placement groups page shows the created group and where its bundle is", async () => {
  const page = await signedIn();
  await page.click("nav a[data-tab=placement-groups]");
  const row = `tr[data-pg-id="${group.placement_group_id}"]`;
  await page.waitForSelector(`${row} .badge.s-CREATED`);
  const text = await page.textContent(row);
  assert.match(text, /reserved/);
  assert.match(text, /PACK/);
  assert.match(text, /detached/);
  assert.match(text, /#0 CPU 0\.25 on/);
  assert.ok(await page.isVisible(`${row} a[href="#/nodes/${group.bundles[0].node_id}"]`));
  assert.match(await page.textContent("#pg-counts"), /CREATED 1/);
  await shot(page, "placement-groups");
  await page.context().close();
});

test("a job's page lists its actors and tasks, two clicks from the jobs list", async () => {
  const page = await signedIn();
  await page.click("nav a[data-tab=jobs]");
  await page.click(`tr[data-job-id="${jobId}"] a`);
  await page.waitForSelector(`#job-work tr[data-actor-id="${keeper.actor_id}"]`);
  await page.waitForSelector(`#job-work tr[data-actor-id="${doomed.actor_id}"]`);
  await page.waitForFunction((n) => document.querySelectorAll("#job-work tr[data-task-id]").length === n, MAX_ENDED_TASKS);
  await shot(page, "job-work");
  await page.click(`#job-work tr[data-task-id="${failing.task_id}"] a[href^="#/tasks/"]`);
  await page.waitForSelector(".attempt pre.task-error");

  await page.goBack();
  await page.click(`#job-work a[href="#/actors/${keeper.actor_id}"]`);
  await page.waitForFunction((id) => document.getElementById("actor-id")?.textContent === id, keeper.actor_id);
  await page.context().close();
});

test("a driver that connected by itself is a job with a page of its work", async () => {
  const script = "import oxray\noxray.init()\nping = oxray.remote(lambda: 'pong')\n"
    + "assert oxray.get(ping.remote()) == 'pong'\nprint(oxray.get_runtime_context().get_job_id())\n";
  const driverJob = execFileSync(python, ["-c", script], { env: cluster.env, encoding: "utf8", timeout: 60_000 }).trim();
  const page = await signedIn();
  await page.click("nav a[data-tab=jobs]");
  // It disconnected: SUCCEEDED, as Ray shows a driver that ended.
  await page.waitForSelector(`tr[data-job-id="${driverJob}"] .badge.s-SUCCEEDED`);
  await page.click(`tr[data-job-id="${driverJob}"] a`);
  await page.waitForSelector(`#job-work tr[data-task-id]:has-text("lambda")`);
  assert.equal(await page.isVisible("#stop-job"), false, "a driver of its own has nothing to stop");
  await shot(page, "driver-job");
  await page.context().close();
});
