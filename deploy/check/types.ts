// types.ts -- the shapes deploy-check holds the documents to for which no
// Debian or npm package ships a schema: KServe's ServingRuntime and
// InferenceService (the fields of KServe's CRDs, serving.kserve.io
// v1alpha1 and v1beta1, that flatserve's manifests may use), the
// prometheus-adapter's rules file, and a kustomization. Core Kubernetes
// types inside them come from kubernetes-models, so a container, a probe
// or a volume is held to Kubernetes' own schema. tsc rejects any field
// not declared here (excess property checks), which is the point: a typo
// fails the check instead of being ignored by the cluster.
import type { IObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";
import type { IContainer } from "kubernetes-models/v1/Container";
import type { IPodSpec } from "kubernetes-models/v1/PodSpec";
import type { IVolume } from "kubernetes-models/v1/Volume";
import type { IToleration } from "kubernetes-models/v1/Toleration";
import type { IAffinity } from "kubernetes-models/v1/Affinity";

export type ProtocolVersion = "v1" | "v2" | "grpc-v1" | "grpc-v2";

export interface SupportedModelFormat {
  name: string;
  version?: string;
  autoSelect?: boolean;
  priority?: number;
}

export interface ServingRuntimeSpec {
  annotations?: Record<string, string>;
  labels?: Record<string, string>;
  supportedModelFormats?: SupportedModelFormat[];
  protocolVersions?: ProtocolVersion[];
  multiModel?: boolean;
  disabled?: boolean;
  replicas?: number;
  containers: IContainer[];
  volumes?: IVolume[];
  nodeSelector?: Record<string, string>;
  tolerations?: IToleration[];
  affinity?: IAffinity;
}

export interface ServingRuntime {
  apiVersion: "serving.kserve.io/v1alpha1";
  kind: "ServingRuntime" | "ClusterServingRuntime";
  metadata: IObjectMeta & { name: string };
  spec: ServingRuntimeSpec;
}

export type ModelSpec = Partial<IContainer> & {
  modelFormat: { name: string; version?: string };
  runtime?: string;
  protocolVersion?: ProtocolVersion;
  storageUri?: string;
};

// A predictor is a pod spec (its fields inline) with KServe's own.
export type PredictorSpec = Partial<IPodSpec> & {
  model?: ModelSpec;
  minReplicas?: number;
  maxReplicas?: number;
  scaleTarget?: number;
  scaleMetric?: "cpu" | "memory" | "concurrency" | "rps";
  containerConcurrency?: number;
  timeout?: number;
  canaryTrafficPercent?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
};

export interface InferenceService {
  apiVersion: "serving.kserve.io/v1beta1";
  kind: "InferenceService";
  metadata: IObjectMeta & { name: string };
  spec: { predictor: PredictorSpec };
}

// prometheus-adapter's --config file (its docs/config.md).
export interface AdapterRule {
  seriesQuery: string;
  seriesFilters?: ({ is: string } | { isNot: string })[];
  resources: {
    overrides?: Record<string, { resource: string; group?: string }>;
    template?: string;
  };
  name: { matches: string; as?: string };
  metricsQuery: string;
}

export interface AdapterConfig {
  rules: AdapterRule[];
}

export interface Kustomization {
  apiVersion: "kustomize.config.k8s.io/v1beta1";
  kind: "Kustomization";
  resources: string[];
  labels?: { pairs: Record<string, string>; includeSelectors?: boolean }[];
}
