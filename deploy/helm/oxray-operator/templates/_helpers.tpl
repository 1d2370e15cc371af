{{/* The chart's name, overridable because a parent chart may embed it twice. */}}
{{- define "oxray-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object. Kubernetes names are at most 63 characters; a release name that
already holds the chart's name is not repeated.
*/}}
{{- define "oxray-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "oxray-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Only the labels that never change go into selectors: a Deployment's selector is immutable. */}}
{{- define "oxray-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "oxray-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "oxray-operator.labels" -}}
helm.sh/chart: {{ include "oxray-operator.chart" . }}
{{ include "oxray-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: oxray
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "oxray-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "oxray-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "oxray-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/* The namespaces the operator watches; empty means all of them. */}}
{{- define "oxray-operator.watchNamespaces" -}}
{{- if .Values.watchNamespace }}
{{- toJson (uniq .Values.watchNamespace) }}
{{- else if .Values.singleNamespaceInstall }}
{{- toJson (list .Release.Namespace) }}
{{- else }}
{{- toJson list }}
{{- end }}
{{- end }}

{{- define "oxray-operator.leaderElect" -}}
{{- if or .Values.leaderElectionEnabled (gt (int .Values.replicas) 1) }}true{{ end }}
{{- end }}

{{/*
What the operator may do. One list for the ClusterRole and the per-namespace Roles, so the
two installs grant the same rights. Leases are for leader election.
*/}}
{{- define "oxray-operator.rules" -}}
- apiGroups: ["oxray.io"]
  resources: ["rayclusters", "rayjobs", "rayservices"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["oxray.io"]
  resources: ["rayclusters/status", "rayjobs/status", "rayservices/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["oxray.io"]
  resources: ["rayclusters/finalizers", "rayjobs/finalizers", "rayservices/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods", "services", "secrets", "serviceaccounts", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{ include "oxray-operator.leaderElectionRules" . }}
{{- end }}

{{- define "oxray-operator.leaderElectionRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
{{- end }}
