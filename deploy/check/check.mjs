// check.mjs -- `make deploy-check`: deploy/ validated, without a cluster.
//
//   1. Every manifest against its schema: the Kubernetes and
//      prometheus-operator kinds through kubernetes-models' JSON schemas
//      (ajv: types, required fields, formats), and every document, KServe's
//      and the adapter's included, through tsc over kubernetes-models'
//      types and types.ts, whose excess-property checks reject any field
//      the kind does not have (a typo the API server would refuse, or
//      silently drop).
//   2. The alert rules with `promtool check rules` and their unit tests
//      with `promtool test rules` (alerts_test.yaml); each adapter rule's
//      metricsQuery rendered for a pod and parsed by promtool.
//   3. The ConfigMap's flatserve.json with `flatserve --check-config`.
//   4. A real flatserve on the demo repository (CPU, loopback): every metric
//      named by the dashboard, the alerts and the adapter rules is one its
//      /metrics exports, with the labels their selectors use; then SIGTERM
//      must drain and exit 0, as the Deployment's stop relies on.
//   5. Cross-checks: the stop budget (terminationGracePeriodSeconds covers
//      the preStop sleep plus server.shutdown_timeout), the HPA's metrics
//      are the adapter's, the kustomization lists every manifest.
//
// Usage: node check.mjs --server PATH --models DIR [--promtool PATH]
// Prints one line per check; exits 1 naming every failure.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import yaml from "js-yaml";
import { ConfigMap, Container, PodSpec, Service } from "kubernetes-models/v1";
import { Deployment } from "kubernetes-models/apps/v1";
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const DEPLOY = path.dirname(HERE);
const REPO = path.dirname(DEPLOY);

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const SERVER = args.server;
const MODELS = args.models;
const PROMTOOL = args.promtool || "promtool";
if (!SERVER || !MODELS) {
  console.error("usage: node check.mjs --server PATH --models DIR [--promtool PATH]");
  process.exit(2);
}

const failures = [];
let passed = 0;
function check(what, fn) {
  try {
    fn();
    passed++;
    console.log(`ok    ${what}`);
  } catch (e) {
    failures.push(`${what}: ${e.message}`);
    console.log(`FAIL  ${what}\n      ${e.message.replaceAll("\n", "\n      ")}`);
  }
}
async function checkAsync(what, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok    ${what}`);
  } catch (e) {
    failures.push(`${what}: ${e.message}`);
    console.log(`FAIL  ${what}\n      ${e.message.replaceAll("\n", "\n      ")}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
const rel = (p) => path.relative(REPO, p);

// ---- the documents ----------------------------------------------------------------

// Each kind: its kubernetes-models class (ajv schema) and its TypeScript
// type [name, module] for tsc.
const KINDS = {
  "v1/ConfigMap": { model: ConfigMap, type: ["IConfigMap", "kubernetes-models/v1/ConfigMap"] },
  "v1/Service": { model: Service, type: ["IService", "kubernetes-models/v1/Service"] },
  "apps/v1/Deployment": { model: Deployment, type: ["IDeployment", "kubernetes-models/apps/v1/Deployment"] },
  "policy/v1/PodDisruptionBudget": {
    model: PodDisruptionBudget,
    type: ["IPodDisruptionBudget", "kubernetes-models/policy/v1/PodDisruptionBudget"],
  },
  "autoscaling/v2/HorizontalPodAutoscaler": {
    model: HorizontalPodAutoscaler,
    type: ["IHorizontalPodAutoscaler", "kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler"],
  },
  "monitoring.coreos.com/v1/ServiceMonitor": {
    model: ServiceMonitor,
    type: ["IServiceMonitor", "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor"],
  },
  "monitoring.coreos.com/v1/PrometheusRule": {
    model: PrometheusRule,
    type: ["IPrometheusRule", "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule"],
  },
  "serving.kserve.io/v1alpha1/ServingRuntime": { validate: validateRuntime, type: ["ServingRuntime", "../types.js"] },
  "serving.kserve.io/v1beta1/InferenceService": { validate: validateIsvc, type: ["InferenceService", "../types.js"] },
  "kustomize.config.k8s.io/v1beta1/Kustomization": { validate: () => {}, type: ["Kustomization", "../types.js"] },
};

// KServe's kinds: their core parts through Kubernetes' schemas.
function validateRuntime(doc) {
  for (const c of doc.spec?.containers ?? []) new Container(c).validate();
  assert((doc.spec?.supportedModelFormats ?? []).length > 0, "spec.supportedModelFormats is empty");
}
function validateIsvc(doc) {
  const { model, minReplicas, maxReplicas, scaleTarget, scaleMetric, containerConcurrency, timeout,
    canaryTrafficPercent, labels, annotations, ...pod } = doc.spec?.predictor ?? {};
  new PodSpec({ containers: [], ...pod }).validate();
  assert(model, "spec.predictor.model is missing");
  const { modelFormat, runtime, protocolVersion, storageUri, ...container } = model;
  new Container({ name: "kserve-container", ...container }).validate();
}

function loadDocs() {
  const docs = [];
  for (const dir of ["k8s", "kserve", "prometheus-adapter"]) {
    const full = path.join(DEPLOY, dir);
    for (const f of readdirSync(full).filter((n) => n.endsWith(".yaml")).sort()) {
      const file = path.join(full, f);
      yaml.loadAll(readFileSync(file, "utf8"), (doc) => {
        if (doc) docs.push({ file, index: docs.filter((d) => d.file === file).length, doc });
      });
    }
  }
  return docs;
}

function kindOf(d) {
  if (rel(d.file) === "deploy/prometheus-adapter/config.yaml") return { validate: () => {}, type: ["AdapterConfig", "../types.js"] };
  return KINDS[`${d.doc.apiVersion}/${d.doc.kind}`];
}

function checkSchemas(docs) {
  for (const d of docs) {
    const k = kindOf(d);
    const name = `${rel(d.file)}#${d.index} ${d.doc.kind ?? "rules"} ${d.doc.metadata?.name ?? ""}`.trim();
    check(`schema: ${name}`, () => {
      assert(k, `no schema for apiVersion ${d.doc.apiVersion} kind ${d.doc.kind}`);
      if (k.model) new k.model(d.doc).validate();
      else k.validate(d.doc);
    });
  }
}

// Every document as a typed constant; tsc's errors mapped back to them.
function checkTypes(docs) {
  const gen = path.join(HERE, ".generated");
  mkdirSync(gen, { recursive: true });
  const imports = new Map();
  const body = [];
  const ranges = [];
  let line = 1;
  docs.forEach((d, i) => {
    const k = kindOf(d);
    if (!k) return;
    const [type, mod] = k.type;
    imports.set(`${type}@${mod}`, `import type { ${type} as T${imports.size} } from "${mod}";`);
    const alias = [...imports.keys()].indexOf(`${type}@${mod}`);
    const text = `export const doc${i}: T${alias} = ${JSON.stringify(d.doc, null, 2)};`;
    ranges.push({ from: line, to: line + text.split("\n").length - 1, d });
    line += text.split("\n").length;
    body.push(text);
  });
  const head = [...imports.values()];
  const src = [...head, ...body].join("\n") + "\n";
  writeFileSync(path.join(gen, "manifests.ts"), src);
  let out = "";
  try {
    execFileSync(path.join(HERE, "node_modules/.bin/tsc"), ["-p", path.join(HERE, "tsconfig.json")], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
  } catch (e) {
    out = `${e.stdout ?? ""}${e.stderr ?? ""}`;
  }
  const byDoc = new Map();
  const other = [];
  for (const m of out.matchAll(/^(.*?)\((\d+),\d+\): (error .*)$/gm)) {
    const l = Number(m[2]) - head.length;
    const r = m[1].endsWith("manifests.ts") ? ranges.find((x) => l >= x.from && l <= x.to) : null;
    if (r) byDoc.set(r.d, [...(byDoc.get(r.d) ?? []), `line ${l - r.from + 1} of its JSON: ${m[3]}`]);
    else other.push(m[0]);
  }
  check("types: tsc compiles types.ts and the documents", () => {
    assert(other.length === 0 && (out === "" || byDoc.size > 0), other.join("\n") || out);
  });
  for (const r of ranges) {
    check(`fields: ${rel(r.d.file)}#${r.d.index} has only fields its kind defines`, () => {
      const errs = byDoc.get(r.d);
      assert(!errs, (errs ?? []).join("\n"));
    });
  }
}

// ---- PromQL -----------------------------------------------------------------------

const METRIC = /\b(?:nv|flatserve|process)_[A-Za-z0-9_]+/g;
const SCRAPE_LABELS = new Set(["namespace", "pod", "job", "instance", "service", "endpoint", "container"]);

function promtool(argv, what) {
  try {
    return execFileSync(PROMTOOL, argv, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    throw new Error(`${what}: ${e.code === "ENOENT" ? `${PROMTOOL} not found (Debian package prometheus)` : `${e.stdout ?? ""}${e.stderr ?? ""}`}`);
  }
}

// Every query with where it came from.
function dashboardQueries(dash) {
  const qs = [];
  const walk = (panels) => {
    for (const p of panels ?? []) {
      for (const t of p.targets ?? []) qs.push({ where: `dashboard panel "${p.title}" ${t.refId}`, expr: t.expr });
      walk(p.panels);
    }
  };
  walk(dash.panels);
  for (const v of dash.templating?.list ?? []) {
    if (v.type !== "query") continue;
    qs.push({ where: `dashboard variable $${v.name}`, expr: typeof v.query === "string" ? v.query : v.query.query });
  }
  return qs;
}

function renderAdapterQuery(rule) {
  const series = rule.seriesQuery.match(/^[A-Za-z_:][A-Za-z0-9_:]*/)[0];
  return rule.metricsQuery
    .replaceAll("<<.Series>>", series)
    .replaceAll("<<.LabelMatchers>>", 'namespace="default",pod=~"flatserve-0|flatserve-1"')
    .replaceAll("<<.GroupBy>>", "pod");
}

// ---- the live server --------------------------------------------------------------

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts flatserve on the demo repository, scrapes /metrics after one
// inference, stops it with SIGTERM. Resolves to name -> Set(label names).
async function scrapeServer(log) {
  const port = await freePort();
  const proc = spawn(SERVER, ["--repository", MODELS, "--device", "cpu", "--host", "127.0.0.1",
    "--port", String(port), "--log-level", "warn"], { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  proc.stdout.on("data", (b) => (output += b));
  proc.stderr.on("data", (b) => (output += b));
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  const base = `http://127.0.0.1:${port}`;
  try {
    let ready = false;
    for (let i = 0; i < 240 && !ready && proc.exitCode === null; i++) {
      ready = await fetch(`${base}/v2/health/ready`).then((r) => r.ok, () => false);
      if (!ready) await sleep(250);
    }
    assert(ready, `flatserve did not become ready in 60 s:\n${output}`);
    const data = Array.from({ length: 64 }, (_, i) => i / 64);
    const inf = await fetch(`${base}/v2/models/mlp/infer`, {
      method: "POST",
      body: JSON.stringify({ inputs: [{ name: "input", shape: [1, 64], datatype: "FP32", data }] }),
    });
    assert(inf.ok, `an inference on mlp failed: ${inf.status} ${await inf.text()}`);
    const text = await (await fetch(`${base}/metrics`)).text();
    const names = new Map();
    for (const line of text.split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const m = line.match(/^([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?/);
      const labels = names.get(m[1]) ?? new Set();
      for (const l of (m[3] ?? "").matchAll(/([A-Za-z_][A-Za-z0-9_]*)="/g)) labels.add(l[1]);
      names.set(m[1], labels);
    }
    log.names = names;
  } finally {
    if (proc.exitCode === null) proc.kill("SIGTERM");
  }
  const timer = sleep(40000).then(() => ({ timeout: true }));
  log.exit = await Promise.race([exited, timer]);
  if (log.exit.timeout) proc.kill("SIGKILL");
  log.output = output;
}

// ---- main -------------------------------------------------------------------------

const docs = loadDocs();
const find = (kind) => docs.filter((d) => d.doc.kind === kind);
checkSchemas(docs);
checkTypes(docs);

const tmp = mkdtempSync(path.join(os.tmpdir(), "flatserve-deploy-check-"));
const ruleDoc = find("PrometheusRule")[0]?.doc;
const adapter = docs.find((d) => rel(d.file) === "deploy/prometheus-adapter/config.yaml")?.doc;
const dashFile = path.join(DEPLOY, "grafana/flatserve-dashboard.json");
let dash = null;
check(`dashboard: ${rel(dashFile)} is a Grafana dashboard`, () => {
  dash = JSON.parse(readFileSync(dashFile, "utf8"));
  assert(dash.uid && dash.title && Array.isArray(dash.panels), "no uid, title or panels");
  const qs = dashboardQueries(dash);
  assert(qs.length > 0, "no queries");
  for (const q of qs) assert(q.expr && q.expr.match(METRIC), `${q.where} names no flatserve metric`);
});

check("rules: promtool check rules on the PrometheusRule's spec", () => {
  assert(ruleDoc, "no PrometheusRule in deploy/k8s");
  writeFileSync(path.join(tmp, "flatserve-rules.yaml"), yaml.dump(ruleDoc.spec));
  promtool(["check", "rules", path.join(tmp, "flatserve-rules.yaml")], "promtool check rules");
});
check("rules: promtool test rules (deploy/check/alerts_test.yaml)", () => {
  writeFileSync(path.join(tmp, "alerts_test.yaml"), readFileSync(path.join(HERE, "alerts_test.yaml")));
  promtool(["test", "rules", path.join(tmp, "alerts_test.yaml")], "promtool test rules");
});
check("adapter: each rule's metricsQuery, rendered for a pod, parses", () => {
  assert(adapter?.rules?.length, "no rules in deploy/prometheus-adapter/config.yaml");
  const groups = [{ name: "adapter", rules: adapter.rules.map((r, i) => ({ record: `adapter:rule${i}`, expr: renderAdapterQuery(r) })) }];
  writeFileSync(path.join(tmp, "adapter-rules.yaml"), yaml.dump({ groups }));
  promtool(["check", "rules", path.join(tmp, "adapter-rules.yaml")], "promtool on the rendered adapter queries");
  for (const r of adapter.rules) {
    const series = r.seriesQuery.match(/^[A-Za-z_:][A-Za-z0-9_:]*/)[0];
    assert(new RegExp(r.name.matches).test(series), `name.matches ${r.name.matches} does not match ${series}`);
  }
});

const cm = find("ConfigMap")[0]?.doc;
check("config: the ConfigMap's flatserve.json passes flatserve --check-config", () => {
  assert(cm?.data?.["flatserve.json"], "no flatserve.json in the ConfigMap");
  const f = path.join(tmp, "flatserve.json");
  writeFileSync(f, cm.data["flatserve.json"]);
  try {
    execFileSync(SERVER, ["--config", f, "--check-config"], { stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    throw new Error(`${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
});

// The cross-checks.
const dep = find("Deployment")[0]?.doc;
check("stop: terminationGracePeriodSeconds covers the preStop sleep and server.shutdown_timeout", () => {
  const pod = dep.spec.template.spec;
  const c = pod.containers[0];
  const pre = c.lifecycle?.preStop?.exec?.command;
  assert(pre && pre[0] === "sleep", "the preStop hook is not a sleep");
  const cfg = JSON.parse(cm.data["flatserve.json"]);
  const t = cfg.server?.shutdown_timeout ?? "30s";
  const m = /^(\d+)s$/.exec(t);
  assert(m, `server.shutdown_timeout ${t} is not whole seconds`);
  const need = Number(pre[1]) + Number(m[1]) + 1;
  assert(pod.terminationGracePeriodSeconds >= need,
    `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} < preStop ${pre[1]} s + shutdown_timeout ${m[1]} s + 1`);
  const port = c.ports.find((p) => p.name === "http");
  assert(port && port.containerPort === (cfg.server?.port ?? 8000), "the container's http port is not flatserve.json's");
  for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) assert(c[p]?.httpGet?.port === "http", `${p} is not on the http port`);
  assert(c.readinessProbe.httpGet.path === "/v2/health/ready" && c.livenessProbe.httpGet.path === "/v2/health/live",
    "readiness must be /v2/health/ready and liveness /v2/health/live");
});
check("hpa: its metrics are the adapter's", () => {
  const served = new Set(adapter.rules.map((r) => r.name.as));
  for (const m of find("HorizontalPodAutoscaler")[0].doc.spec.metrics)
    assert(served.has(m.pods?.metric?.name), `HPA metric ${m.pods?.metric?.name} is no adapter rule's`);
});
check("kustomization: lists every manifest of deploy/k8s", () => {
  const k = find("Kustomization")[0].doc;
  const files = readdirSync(path.join(DEPLOY, "k8s")).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
  assert(JSON.stringify([...k.resources].sort()) === JSON.stringify(files.sort()),
    `resources ${k.resources.join(", ")}; files ${files.join(", ")}`);
});

const live = {};
await checkAsync("server: flatserve serves the demo repository and answers /metrics", () => scrapeServer(live));
check("server: SIGTERM drains and exits 0", () => {
  assert(live.exit && !live.exit.timeout, "flatserve did not exit within 40 s of SIGTERM");
  assert(live.exit.code === 0, `exit ${live.exit.code} (signal ${live.exit.signal}):\n${live.output}`);
});
if (live.names) {
  const queries = [
    ...(dash ? dashboardQueries(dash) : []),
    ...(ruleDoc?.spec?.groups ?? []).flatMap((g) => g.rules.map((r) => ({ where: `alert ${r.alert ?? r.record}`, expr: r.expr }))),
    ...(adapter?.rules ?? []).flatMap((r, i) => [
      { where: `adapter rule ${i} seriesQuery`, expr: r.seriesQuery },
      { where: `adapter rule ${i} metricsQuery`, expr: renderAdapterQuery(r) },
    ]),
  ];
  check(`metrics: the ${queries.length} queries name only metrics, and labels, that flatserve exports`, () => {
    const bad = [];
    for (const q of queries) {
      for (const name of q.expr.match(METRIC) ?? [])
        if (!live.names.has(name)) bad.push(`${q.where}: ${name} is not exported`);
      for (const m of q.expr.matchAll(/\b((?:nv|flatserve|process)_[A-Za-z0-9_]+)\s*\{([^}]*)\}/g)) {
        const have = live.names.get(m[1]);
        if (!have) continue;
        for (const l of m[2].matchAll(/([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)/g))
          if (!SCRAPE_LABELS.has(l[1]) && !have.has(l[1])) bad.push(`${q.where}: ${m[1]} has no label ${l[1]}`);
      }
    }
    assert(bad.length === 0, bad.join("\n"));
  });
}

rmSync(tmp, { recursive: true, force: true });
console.log(`deploy-check: ${passed} passed, ${failures.length} failed`);
process.exit(failures.length ? 1 : 0);
