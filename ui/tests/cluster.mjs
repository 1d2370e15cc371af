// A real oxray cluster for browser tests: a head and two more nodes on loopback, in a
// temporary oxray home, started and stopped through the `oxray` binary (OXRAY_BIN).
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const bin = process.env.OXRAY_BIN || join(repo, "target", "debug", "oxray");
// A Python with the oxray package, for drivers that jobs run (`make venv` makes this one).
export const python = process.env.OXRAY_PYTHON || join(repo, ".venv", "bin", "python");
// Where the tests save their screenshots.
export const shots = process.env.OXRAY_UI_SCREENSHOTS || join(tmpdir(), "oxray-ui-screenshots");

/** `s` quoted for a shell. */
export const quote = (s) => `'${s.replaceAll("'", "'\\''")}'`;
/** A full-page screenshot of `page` as `<name>.png` in `shots`. */
export const shot = (page, name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Asks `probe` until it returns something, every `every` ms for at most `ms`. */
export async function eventually(what, probe, ms = 60_000, every = 250) {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = await probe();
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}

/** Fails early, and says why, when the drivers' Python cannot import oxray; makes the
 * screenshot folder. */
export function checkPython() {
  try {
    execFileSync(python, ["-c", "import oxray"], { stdio: "pipe" });
  } catch (e) {
    throw new Error(`these tests run drivers in ${python}, which cannot import oxray: run \`make venv\` or set OXRAY_PYTHON (${e.message})`);
  }
  mkdirSync(shots, { recursive: true });
}

export class Cluster {
  constructor() {
    this.dir = mkdtempSync(join(tmpdir(), "oxray-ui-"));
    this.env = { ...process.env, OXRAY_HOME: join(this.dir, "home"), OXRAY_TEMP_DIR: join(this.dir, "sessions") };
    delete this.env.OXRAY_ADDRESS;
    delete this.env.OXRAY_AUTH_TOKEN;
  }

  oxray(...args) {
    return execFileSync(bin, args, { env: this.env, encoding: "utf8", timeout: 60_000 });
  }

  // `headArgs`: more options of the head's `oxray start`.
  start({ headArgs = [] } = {}) {
    this.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2", "--node-ip-address", "127.0.0.1", ...headArgs);
    const current = JSON.parse(readFileSync(join(this.env.OXRAY_HOME, "current_cluster.json"), "utf8"));
    this.url = current.dashboard_url;
    this.token = this.oxray("get-auth-token").trim();
    for (const name of ["gpu-box-1", "gpu-box-2"]) {
      this.oxray("start", "--address", current.address, "--num-cpus", "1", "--node-name", name,
        "--labels", "zone=b", "--node-ip-address", "127.0.0.1");
    }
    return this;
  }

  async api(path, options = {}) {
    const response = await fetch(this.url + path, { ...options, headers: { Authorization: `Bearer ${this.token}`, ...options.headers } });
    if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
    return response.json();
  }

  async submit(entrypoint, extra = {}) {
    const reply = await this.api("/api/jobs/", { method: "POST", body: JSON.stringify({ entrypoint, ...extra }) });
    return reply.submission_id;
  }

  async nodeIds() {
    const reply = await this.api("/api/v0/nodes?limit=100");
    return reply.data.result.result.map((n) => n.node_id);
  }

  stop() {
    try {
      this.oxray("stop", "--force");
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }
}

// Without the networking flags Chromium keeps dialing hosts this machine cannot reach.
const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

// Debian's Chromium, headless ($CHROMIUM picks another).
export function launchChromium() {
  return chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: CHROMIUM_ARGS });
}

// A page of `cluster`'s dashboard, signed in with its token.
export async function signedIn(browser, cluster) {
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
  const page = await context.newPage();
  await page.goto(cluster.url);
  await page.fill("#token", cluster.token);
  await page.click("button[type=submit]");
  await page.waitForSelector("#nodes-alive");
  return page;
}
