// The Serve page in real headless Chromium: a declarative application of two replicas that
// runs and one that cannot be imported, deployed through Serve's REST API. Screenshots go to
// $OXRAY_UI_SCREENSHOTS, else the OS's temporary folder.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkPython, Cluster, eventually, launchChromium, python, shot, signedIn as signIn } from "./cluster.mjs";

const APP = `
from oxray import serve


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5})
class Echo:
    def __call__(self, request):
        print("echo was called")
        return "echo"


app = Echo.bind()
`;

let cluster;
let browser;

before(async () => {
  checkPython();
  cluster = new Cluster();
  // The applications' builder runs no driver's interpreter: the cluster's default, this one.
  cluster.env.OXRAY_PYTHON = python;
  cluster.start();
  const code = join(cluster.dir, "code");
  mkdirSync(code);
  writeFileSync(join(code, "echo_app.py"), APP);
  const config = {
    applications: [
      { name: "echo", route_prefix: "/echo", import_path: "echo_app:app", runtime_env: { working_dir: code } },
      { name: "broken", route_prefix: "/broken", import_path: "no_such_module:app" },
    ],
  };
  const response = await fetch(`${cluster.url}/api/serve/applications/`, {
    method: "PUT", body: JSON.stringify(config),
    headers: { Authorization: `Bearer ${cluster.token}`, "Content-Type": "application/json" },
  });
  assert.equal(response.status, 200, await response.text());
  await eventually("echo to run and broken to fail", async () => {
    const apps = (await cluster.api("/api/serve/applications/")).applications;
    return apps.echo?.status === "RUNNING" && apps.broken?.status === "DEPLOY_FAILED";
  }, 120_000);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  cluster?.stop();
});

test("the Serve page shows each application, its deployments and their replicas", async () => {
  const page = await signIn(browser, cluster);
  await page.click("nav a[data-tab=serve]");
  await page.waitForSelector("[data-serve-app=echo] h2 .badge.s-RUNNING");
  assert.match(await page.textContent("#serve-counts"), /RUNNING 1/);
  assert.match(await page.textContent("#serve-counts"), /DEPLOY_FAILED 1/);
  const echo = "[data-serve-app=echo]";
  assert.match(await page.textContent(`${echo} dl`), /\/echo/);
  assert.match(await page.textContent(`${echo} dl`), /echo_app:app/);
  await page.waitForFunction(() => document.querySelectorAll("[data-serve-app=echo] tr[data-replica] .badge.s-RUNNING").length === 2);
  assert.match(await page.textContent(`${echo} tr[data-deployment=Echo]`), /HEALTHY/);
  assert.match(await page.textContent(`${echo} tr[data-deployment=Echo]`), /2 \/ 2/);
  // The failed application says why.
  await page.waitForSelector("[data-serve-app=broken] h2 .badge.s-DEPLOY_FAILED");
  assert.match(await page.textContent("[data-serve-app=broken] pre.serve-message"), /No module named 'no_such_module'/);
  await shot(page, "serve");

  // A replica's output is two clicks away: its actor's log, from the replica's row.
  const stdout = page.locator(`${echo} tr[data-replica] a:has-text("stdout")`).first();
  const href = await stdout.getAttribute("href");
  assert.match(href, /^#\/logs\?actor_id=[0-9a-f]+$/);
  await stdout.click();
  await page.waitForSelector("#log-text");
  await page.context().close();
});

test("the Serve page says when Serve runs nothing", async () => {
  const response = await fetch(`${cluster.url}/api/serve/applications/`, { method: "DELETE", headers: { Authorization: `Bearer ${cluster.token}` } });
  assert.equal(response.status, 200, await response.text());
  const page = await signIn(browser, cluster);
  await page.click("nav a[data-tab=serve]");
  await page.waitForSelector("#serve-empty", { timeout: 60_000 });
  await page.context().close();
});
