{{- define "oxray-cluster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The RayCluster's name. At most 54 characters: the operator names the head Service
"<cluster>-head-svc", and a Service name is at most 63. A release name that already holds
the chart's name is not repeated.
*/}}
{{- define "oxray-cluster.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "oxray-cluster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "oxray-cluster.labels" -}}
helm.sh/chart: {{ include "oxray-cluster.chart" . }}
app.kubernetes.io/name: {{ include "oxray-cluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: oxray
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The whole rayStartParams key. The CRD holds a map of strings; values files and --set give
numbers and booleans too.
*/}}
{{- define "oxray-cluster.rayStartParams" -}}
{{- $params := dict }}
{{- range $key, $value := . }}
{{- $_ := set $params $key (toString $value) }}
{{- end -}}
rayStartParams:
{{- if $params }}
{{- toYaml $params | nindent 2 }}
{{- else }} {}
{{- end }}
{{- end }}

{{/*
The pod template of one group. Arguments: root (the chart's context), group (the group's
values), container (the oxray container's name). The oxray container comes first: the
operator finds it at index 0.
*/}}
{{- define "oxray-cluster.podTemplate" -}}
{{- $root := .root }}
{{- $group := .group }}
{{- $image := mergeOverwrite (deepCopy $root.Values.image) ($group.image | default dict) }}
{{- $env := concat ($root.Values.common.containerEnv | default list) ($group.containerEnv | default list) -}}
metadata:
  labels:
    {{- include "oxray-cluster.labels" $root | nindent 4 }}
    {{- with $group.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $group.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $group.serviceAccountName }}
  serviceAccountName: {{ . }}
  {{- end }}
  {{- with $group.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $group.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $group.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $group.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $group.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $group.initContainers }}
  initContainers:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .container }}
      image: {{ printf "%s:%s" $image.repository ($image.tag | default $root.Chart.AppVersion | toString) | quote }}
      imagePullPolicy: {{ $image.pullPolicy | default "IfNotPresent" }}
      {{- with $env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $group.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $group.ports }}
      ports:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $group.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $group.volumeMounts }}
      volumeMounts:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $group.securityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- with $group.sidecarContainers }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $group.volumes }}
  volumes:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* One entry of spec.workerGroupSpecs. Arguments: root, name, group. */}}
{{- define "oxray-cluster.workerGroup" -}}
{{- $group := .group }}
{{- if and (hasKey $group "minReplicas") (hasKey $group "maxReplicas") }}
{{- if gt (int $group.minReplicas) (int $group.maxReplicas) }}
{{- fail (printf "worker group %s: minReplicas (%v) is above maxReplicas (%v)" .name $group.minReplicas $group.maxReplicas) }}
{{- end }}
{{- end -}}
- groupName: {{ .name }}
  {{- range $key := list "replicas" "minReplicas" "maxReplicas" "idleTimeoutSeconds" }}
  {{- if hasKey $group $key }}
  {{ $key }}: {{ index $group $key | int }}
  {{- end }}
  {{- end }}
  {{- include "oxray-cluster.rayStartParams" ($group.rayStartParams | default dict) | nindent 2 }}
  template:
    {{- include "oxray-cluster.podTemplate" (dict "root" .root "group" $group "container" "ray-worker") | nindent 4 }}
{{- end }}
