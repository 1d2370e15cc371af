// The charts of the nodes' use in real headless Chromium, while a job's Python driver runs
// tasks that keep CPUs busy: the overview charts the cluster, a node's page the node, one
// point a reading. Replies of /api/ui/usage stood in for by the test show the charts of a
// cluster with no reading yet and of nodes with GPUs. Screenshots go to $OXRAY_UI_SCREENSHOTS,
// else the OS's temporary folder.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkPython, Cluster, eventually, launchChromium, python, quote, shot, signedIn as signIn } from "./cluster.mjs";


const WORKLOAD = `
import time
import oxray

oxray.init()

@oxray.remote
def spin(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        n += 1
    return n

print(sum(oxray.get([spin.remote(10) for _ in range(2)])))
`;

const CHARTS = ["cpu", "memory", "object-store", "running"];

let cluster;
let browser;
let head;

before(async () => {
  checkPython();
  cluster = new Cluster().start();
  const script = join(cluster.dir, "workload.py");
  writeFileSync(script, WORKLOAD);
  await cluster.submit(`${quote(python)} ${quote(script)}`);
  head = (await cluster.api("/api/v0/nodes?detail=True")).data.result.result.find((n) => n.is_head_node).node_id;
  browser = await launchChromium();
  // Three readings of every node, one of them while the tasks ran.
  await eventually("three readings of each node, with tasks running", async () => {
    const lists = Object.values((await cluster.api("/api/ui/usage")).nodes);
    return lists.length === 3 && lists.every((l) => l.length >= 3) && lists.some((l) => l.some((r) => r.workers_leased > 0));
  }, 40_000, 500);
});

after(async () => {
  await browser?.close();
  cluster?.stop();
});

const signedIn = () => signIn(browser, cluster);

// The points of each line of a chart, as [x, y] pairs.
function linePoints(page, chart) {
  return page.$$eval(`#usage .chart[data-chart="${chart}"] path.line`, (paths) =>
    paths.map((p) => (p.getAttribute("d").match(/-?[\d.]+,-?[\d.]+/g) || []).map((xy) => xy.split(",").map(Number))));
}

// Waits until each chart's first line has a point for each of the cluster's steps (from the
// oldest step with a reading to the newest) or, with `nodeId`, for each of the node's readings;
// the page asks /api/ui/usage itself, so the count holds for the reply its charts show.
async function pointsMatch(page, charts, nodeId = null) {
  await page.waitForFunction(async ([charts, nodeId]) => {
    const usage = await (await fetch(`/api/ui/usage${nodeId ? `?node_id=${nodeId}` : ""}`)).json();
    const steps = Object.values(usage.nodes).flat().map((r) => Math.floor(r.time_ms / usage.step_ms));
    const expected = nodeId ? usage.nodes[nodeId].length : Math.max(...steps) - Math.min(...steps) + 1;
    return charts.every((chart) => {
      const d = document.querySelector(`#usage .chart[data-chart="${chart}"] path.line`)?.getAttribute("d") || "";
      return (d.match(/[ML]/g) || []).length === expected;
    });
  }, [charts, nodeId], { polling: 250, timeout: 15_000 });
}

test("the overview charts the cluster's use, a point a step, as the tasks move CPU and the running count", async () => {
  const page = await signedIn();
  await page.waitForSelector("#usage .chart[data-chart=running] path.line", { state: "attached" });
  const shown = await page.$$eval("#usage .chart", (els) => els.map((el) => el.dataset.chart));
  assert.deepEqual(shown, CHARTS, "no GPU chart on a cluster without GPUs");
  await pointsMatch(page, CHARTS);

  const [cpu] = await linePoints(page, "cpu");
  const [running] = await linePoints(page, "running");
  assert.ok(new Set(cpu.map(([, y]) => y)).size > 1, "the CPU line moves");
  assert.ok(new Set(running.map(([, y]) => y)).size > 1, "the running line moves");
  const store = await linePoints(page, "object-store");
  assert.equal(store.length, 2, "object store: in memory and spilled");
  assert.match(await page.textContent('#usage .chart[data-chart="cpu"] .chart-head'), /CPU\s*mean of 3 nodes/);
  assert.match(await page.textContent('#usage .chart[data-chart="memory"] .chart-value'), /^[\d.]+ [KMGT]iB of [\d.]+ [KMGT]iB$/);
  const axis = await page.$$eval('#usage .chart[data-chart="cpu"] .axis text', (ts) => ts.map((t) => t.textContent));
  assert.ok(axis.includes("100%") && axis.includes("now") && axis.some((t) => / ago$/.test(t)), `the CPU chart's axes: ${axis}`);

  // The mouse on a chart reads out the value of a past point; refreshes keep the charts' elements.
  const svg = await page.$('#usage .chart[data-chart="cpu"] svg');
  const box = await svg.boundingBox();
  await page.mouse.move(box.x + box.width * 0.2, box.y + box.height * 0.5);
  await page.waitForSelector('#usage .chart[data-chart="cpu"] .chart-value .when');
  assert.match(await page.textContent('#usage .chart[data-chart="cpu"] .chart-value'), /^[\d.]+% · .* ago$/);
  assert.ok(await page.$('#usage .chart[data-chart="cpu"] .rule'), "a rule marks the point");
  await page.waitForTimeout(2_500);
  assert.ok(await svg.evaluate((el) => el.isConnected), "the chart survived the page's refresh");
  assert.ok(await page.isVisible('#usage .chart[data-chart="cpu"] .chart-value .when'), "and still reads out the point");
  await shot(page, "overview-charts");
  await page.mouse.move(0, 0);
  await page.waitForSelector('#usage .chart[data-chart="cpu"] .chart-value .when', { state: "detached" });
  await page.context().close();
});

test("a node's page charts the node's own use, a point a reading", async () => {
  const page = await signedIn();
  await page.evaluate((id) => { location.hash = `#/nodes/${id}`; }, head);
  await page.waitForFunction((id) => document.getElementById("node-id")?.textContent === id, head);
  await page.waitForSelector("#usage .chart[data-chart=cpu] path.line", { state: "attached" });
  const shown = await page.$$eval("#usage .chart", (els) => els.map((el) => el.dataset.chart));
  assert.deepEqual(shown, CHARTS);
  await pointsMatch(page, CHARTS, head);
  assert.match(await page.textContent('#usage .chart[data-chart="cpu"] .chart-head'), /of the node's CPUs/);
  await shot(page, "node-charts");
  await page.context().close();
});

test("a cluster with no reading yet says so, and GPUs get their charts, a line per GPU on a node's page", async () => {
  const page = await signedIn();
  await page.route("**/api/ui/usage*", (route) => route.fulfill({ json: { step_ms: 5000, nodes: {} } }));
  await page.waitForSelector("#usage #usage-empty");
  assert.match(await page.textContent("#usage"), /No readings yet/);
  assert.equal(await page.$("#usage svg"), null);
  await shot(page, "charts-empty");

  // Every reading gains two GPUs, the second busier than the first and using more memory.
  await page.unroute("**/api/ui/usage*");
  await page.route("**/api/ui/usage*", async (route) => {
    const usage = await (await route.fetch()).json();
    for (const r of Object.values(usage.nodes).flat()) {
      r.gpus = [0, 1].map((index) => ({ index, utilization: (index + 1) * 0.3, memory_used: (index + 1) * 2 ** 32, memory_total: 2 ** 34 }));
    }
    await route.fulfill({ json: usage });
  });
  await page.waitForSelector('#usage .chart[data-chart="gpu-memory"] path.line', { state: "attached" });
  assert.match(await page.textContent('#usage .chart[data-chart="gpu"] .chart-head'), /mean of 6 GPUs/);
  assert.match(await page.textContent('#usage .chart[data-chart="gpu"] .chart-value'), /^45%$/);
  assert.match(await page.textContent('#usage .chart[data-chart="gpu-memory"] .chart-value'), /^36 GiB of 96 GiB$/);
  await shot(page, "overview-charts-gpu");

  await page.evaluate((id) => { location.hash = `#/nodes/${id}`; }, head);
  await page.waitForFunction((id) => document.getElementById("node-id")?.textContent === id, head);
  await page.waitForSelector('#usage .chart[data-chart="gpu"] path.line', { state: "attached" });
  const lines = await linePoints(page, "gpu");
  assert.equal(lines.length, 2, "a line per GPU");
  assert.ok(lines[1].every(([, y], i) => y < lines[0][i][1]), "GPU 1 runs above GPU 0");
  assert.match(await page.textContent('#usage .chart[data-chart="gpu-memory"] .chart-head'), /of 16 GiB each/);
  await shot(page, "node-charts-gpu");
  await page.context().close();
});
