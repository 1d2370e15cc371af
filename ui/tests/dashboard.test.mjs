// The dashboard in real headless Chromium against a real cluster with three nodes and a
// running job. Screenshots go to target/ui-screenshots/.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Cluster, launchChromium, signedIn as signIn } from "./cluster.mjs";

const shots = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "target", "ui-screenshots");

let cluster;
let browser;
let longJob;
let shortJob;

before(async () => {
  mkdirSync(shots, { recursive: true });
  cluster = new Cluster().start();
  longJob = await cluster.submit("for i in $(seq 1 600); do echo tick $i; sleep 0.2; done", { metadata: { owner: "ui-test" } });
  shortJob = await cluster.submit("echo finished-quickly");
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  cluster?.stop();
});

const signedIn = () => signIn(browser, cluster);

test("a visitor without the token sees nothing of the cluster", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(cluster.url);
  await page.waitForSelector("#token");
  const ids = await cluster.nodeIds();
  const text = await page.content();
  for (const id of ids) assert.ok(!text.includes(id.slice(0, 12)), "no node id on the sign-in page");
  assert.ok(!text.includes(longJob));
  const status = await page.evaluate(async () => (await fetch("/api/v0/nodes")).status);
  assert.equal(status, 401);
  await page.fill("#token", "not-the-token");
  await page.click("button[type=submit]");
  await page.waitForFunction(() => document.getElementById("login-error").textContent.includes("not this cluster"));
  await page.screenshot({ path: join(shots, "sign-in.png") });
  await context.close();
});

test("the overview and nodes pages show the real nodes", async () => {
  const page = await signedIn();
  await page.waitForFunction(() => document.getElementById("nodes-alive").textContent.startsWith("3"));
  await page.waitForSelector(`text=${shortJob}`);
  await page.screenshot({ path: join(shots, "overview.png"), fullPage: true });

  await page.click("nav a[data-tab=nodes]");
  const ids = await cluster.nodeIds();
  for (const id of ids) await page.waitForSelector(`tr[data-node-id="${id}"]`);
  assert.ok(await page.isVisible("text=gpu-box-2"));
  await page.screenshot({ path: join(shots, "nodes.png"), fullPage: true });

  const head = (await cluster.api("/api/v0/nodes?detail=True")).data.result.result.find((n) => n.is_head_node);
  await page.click(`tr[data-node-id="${head.node_id}"] a`);
  await page.waitForFunction((id) => document.getElementById("node-id")?.textContent === id, head.node_id);
  // The long job runs on the head's node, as jobs without resources do.
  await page.waitForSelector(`text=${longJob}`);
  await page.waitForFunction(() => document.getElementById("node-log").textContent.includes("joined the cluster"));
  await page.screenshot({ path: join(shots, "node.png"), fullPage: true });
  await page.context().close();
});

test("a job's logs follow live, and stop and delete work", async () => {
  const page = await signedIn();
  await page.click("nav a[data-tab=jobs]");
  await page.waitForSelector(`tr[data-job-id="${longJob}"]`);
  await page.waitForSelector(`tr[data-job-id="${shortJob}"]`);
  await page.screenshot({ path: join(shots, "jobs.png"), fullPage: true });

  await page.click(`tr[data-job-id="${longJob}"] a`);
  await page.waitForFunction(() => /tick 2\n/.test(document.getElementById("job-log")?.textContent || ""));
  const before = await page.textContent("#job-log");
  await page.waitForFunction((n) => document.getElementById("job-log").textContent.length > n, before.length);
  assert.ok(await page.isVisible("text=owner=ui-test"));
  await page.screenshot({ path: join(shots, "job-running.png"), fullPage: true });

  await page.click("#stop-job");
  await page.waitForSelector(".badge.s-STOPPED", { timeout: 20_000 });
  const job = await cluster.api(`/api/jobs/${longJob}`);
  assert.equal(job.status, "STOPPED");
  await page.screenshot({ path: join(shots, "job-stopped.png"), fullPage: true });

  await page.waitForSelector("#delete-job:not([disabled])");
  await page.click("#delete-job");
  await page.waitForFunction(() => location.hash === "#/jobs");
  await page.waitForSelector(`tr[data-job-id="${shortJob}"]`);
  assert.equal(await page.isVisible(`tr[data-job-id="${longJob}"]`), false);
  const gone = await fetch(`${cluster.url}/api/jobs/${longJob}`, { headers: { Authorization: `Bearer ${cluster.token}` } });
  assert.equal(gone.status, 404);
  await page.context().close();
});
