{{/*
The chart name, or nameOverride.
*/}}
{{- define "compaction-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name: fullnameOverride, else the release name, followed by
the chart name unless the release name already contains it. Truncated so that the longest
suffix the chart adds ("-controller-manager-metrics-service", 35 characters) still fits
the 63 characters of a Service name.
*/}}
{{- define "compaction-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 28 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 28 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 28 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "compaction-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "compaction-operator.labels" -}}
helm.sh/chart: {{ include "compaction-operator.chart" . }}
{{ include "compaction-operator.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: compaction-operator
{{- end }}

{{/*
Selector labels of the manager pods (the Deployment's selector, the Services', the
NetworkPolicy's). Never change them in an upgrade: a Deployment's selector is immutable.
*/}}
{{- define "compaction-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "compaction-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller-manager
{{- end }}

{{/*
The manager's ServiceAccount name.
*/}}
{{- define "compaction-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-controller-manager" (include "compaction-operator.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The manager image: repository@digest, or repository:tag with the tag defaulting to the
chart's appVersion.
*/}}
{{- define "compaction-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}
{{- end }}

{{/*
Whether the manager runs with --leader-elect: when enabled, and always with more than one
replica.
*/}}
{{- define "compaction-operator.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/*
The cluster resource namespace (--cluster-resource-namespace): where a ClusterCompactionPolicy's
Secrets are by default and where the manager pins each session's storage location.
*/}}
{{- define "compaction-operator.clusterResourceNamespace" -}}
{{- default .Release.Namespace .Values.manager.clusterResourceNamespace }}
{{- end }}

{{/*
GOMEMLIMIT of the manager in bytes: manager.memoryLimitPercent of resources.limits.memory
(a Kubernetes quantity such as 512Mi, 1Gi, 500M or 536870912). Empty when there is no memory
limit, the percentage is 0, or manager.extraEnv sets GOMEMLIMIT itself.
*/}}
{{- define "compaction-operator.goMemLimit" -}}
{{- $limit := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $limit = toString . }}{{ end }}{{ end }}{{ end }}
{{- $percent := .Values.manager.memoryLimitPercent | default 0 | int }}
{{- $own := false }}
{{- range .Values.manager.extraEnv }}{{ if eq .name "GOMEMLIMIT" }}{{ $own = true }}{{ end }}{{ end }}
{{- if and $limit (gt $percent 0) (not $own) }}
{{- if gt $percent 100 }}{{ fail (printf "manager.memoryLimitPercent %d is over 100" $percent) }}{{ end }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $limit }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- $suffix := trimPrefix $number $limit }}
{{- if or (not $number) (not (hasKey $units $suffix)) }}
{{- fail (printf "resources.limits.memory %q: the chart computes GOMEMLIMIT from a number with one of the suffixes k, M, G, T, Ki, Mi, Gi, Ti (or none); set manager.memoryLimitPercent=0 to leave GOMEMLIMIT unset" $limit) }}
{{- end }}
{{- divf (mulf (float64 $number) (get $units $suffix) $percent) 100 | floor | int64 }}
{{- end }}
{{- end }}

{{/*
The compaction API's certificate mode (api.tls.mode), checked; "Insecure" with
api.tls.insecureServeHTTP.
*/}}
{{- define "compaction-operator.tlsMode" -}}
{{- if hasKey .Values.api.tls "enabled" }}
{{- fail "api.tls.enabled was replaced by api.tls.mode: SelfSigned (the default, the manager's own CA), CertManager, or Secret with api.tls.secretName" }}
{{- end }}
{{- if .Values.api.tls.insecureServeHTTP }}Insecure
{{- else if has .Values.api.tls.mode (list "SelfSigned" "CertManager" "Secret") }}{{ .Values.api.tls.mode }}
{{- else }}
{{- fail (printf "api.tls.mode %q: want SelfSigned, CertManager or Secret" (toString .Values.api.tls.mode)) }}
{{- end }}
{{- end }}

{{/*
The Secret mounted as api.tls.certDir (CertManager and Secret modes).
*/}}
{{- define "compaction-operator.apiTLSSecret" -}}
{{- if eq (include "compaction-operator.tlsMode" .) "Secret" }}
{{- required "api.tls.secretName is required when api.tls.mode is Secret" .Values.api.tls.secretName }}
{{- else }}
{{- default (printf "%s-api-tls" (include "compaction-operator.fullname" .)) .Values.api.tls.secretName }}
{{- end }}
{{- end }}

{{/*
The ConfigMap where the manager publishes the API's CA bundle (key ca.crt).
*/}}
{{- define "compaction-operator.apiCAConfigMap" -}}
{{- include "compaction-operator.fullname" . }}-api-ca
{{- end }}

{{/*
The DNS names the API's certificate is for: the API Service's and the metrics Service's.
*/}}
{{- define "compaction-operator.apiDNSNames" -}}
{{- $ns := .Release.Namespace }}
{{- range list (printf "%s-api" (include "compaction-operator.fullname" .)) (printf "%s-controller-manager-metrics-service" (include "compaction-operator.fullname" .)) }}
- {{ . }}
- {{ . }}.{{ $ns }}
- {{ . }}.{{ $ns }}.svc
- {{ . }}.{{ $ns }}.svc.cluster.local
{{- end }}
{{- end }}

{{/*
A map of strings as a CEL map literal, keys sorted: {'cpu': '10m', 'memory': '32Mi'}.
*/}}
{{- define "compaction-operator.celStringMap" -}}
{{- $parts := list }}
{{- range $k, $v := . }}
{{- $parts = append $parts (printf "'%s': '%v'" $k $v) }}
{{- end }}
{{- printf "{%s}" (join ", " $parts) }}
{{- end }}

{{/*
The manager's configuration file (--config; docs/operations.md lists every field), from the
values, with manager.config merged over it.
*/}}
{{- define "compaction-operator.managerConfig" -}}
{{- $tlsMode := include "compaction-operator.tlsMode" . }}
{{- $fullname := include "compaction-operator.fullname" . }}
{{- $tls := dict }}
{{- $metrics := dict "secure" (ne .Values.metrics.secure false) }}
{{- if eq $tlsMode "Insecure" }}
{{- $_ := set $tls "insecureServeHTTP" true }}
{{- else }}
{{- if has $tlsMode (list "CertManager" "Secret") }}
{{- $_ := set $tls "certDir" .Values.api.tls.mountPath }}
{{- else }}
{{- $_ := set $tls "secretName" (printf "%s-api-cert" $fullname) }}
{{- with .Values.api.tls.selfSigned.caValidity }}{{ $_ := set $tls "caValidity" . }}{{ end }}
{{- with .Values.api.tls.selfSigned.certValidity }}{{ $_ := set $tls "certValidity" . }}{{ end }}
{{- end }}
{{- $_ := set $tls "caConfigMap" (include "compaction-operator.apiCAConfigMap" .) }}
{{- $_ := set $tls "serviceName" (printf "%s-api" $fullname) }}
{{- $_ := set $metrics "serviceName" (printf "%s-controller-manager-metrics-service" $fullname) }}
{{- end }}
{{- $api := dict "tokenAudience" (required "api.tokenAudience must be set" .Values.api.tokenAudience) "tls" $tls }}
{{- with .Values.api.maxBodyBytes }}{{ $_ := set $api "maxBodyBytes" (int64 .) }}{{ end }}
{{- with .Values.api.maxInflightBytes }}{{ $_ := set $api "maxInflightBytes" (int64 .) }}{{ end }}
{{- $leaderElection := dict "leaderElect" (eq (include "compaction-operator.leaderElect" .) "true") "resourceNamespace" .Release.Namespace }}
{{- $cfg := dict "leaderElection" $leaderElection "metrics" $metrics "api" $api }}
{{- with .Values.manager.clusterResourceNamespace }}{{ $_ := set $cfg "clusterResourceNamespace" . }}{{ end }}
{{- with .Values.manager.clusterPolicySecretNamespaces }}{{ $_ := set $cfg "secrets" (dict "clusterPolicyNamespaces" .) }}{{ end }}
{{- $egress := dict }}
{{- with .Values.manager.allowedEndpoints }}{{ $_ := set $egress "allowedEndpoints" . }}{{ end }}
{{- with .Values.manager.namespacedPolicyEndpoints }}{{ $_ := set $egress "namespacedPolicyEndpoints" . }}{{ end }}
{{- if $egress }}{{ $_ := set $cfg "egress" $egress }}{{ end -}}
apiVersion: config.compaction.harness9.io/v1alpha1
kind: Configuration
{{ toYaml (mustMergeOverwrite $cfg (deepCopy (.Values.manager.config | default dict))) }}
{{- end }}

{{/*
The Kubernetes API server's endpoints the manager's egress NetworkPolicy admits, as JSON
{"cidrs": [...], "ports": [...]}: networkPolicy.egress.apiServer.cidrs and .ports when cidrs
is set; else the addresses (as /32 and /128) and ports of the EndpointSlices of the
"kubernetes" Service, looked up in the cluster, with .ports added. Where no lookup can run
(helm template, --dry-run=client, a GitOps tool rendering offline) and cidrs is empty, the
chart fails and says what to set: the addresses cannot be guessed, and a rule that admits
every address would let a policy point the manager at any HTTPS endpoint.
*/}}
{{- define "compaction-operator.apiServerEndpoints" -}}
{{- $values := .Values.networkPolicy.egress.apiServer -}}
{{- $cidrs := $values.cidrs | default list -}}
{{- $ports := list -}}
{{- range ($values.ports | default list) -}}
{{- $ports = append $ports (int .) -}}
{{- end -}}
{{- if not $cidrs -}}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" | default dict -}}
{{- range ($slices.items | default list) -}}
{{- if eq (get (.metadata.labels | default dict) "kubernetes.io/service-name") "kubernetes" -}}
{{- range (.endpoints | default list) -}}
{{- range (.addresses | default list) -}}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- range (.ports | default list) -}}
{{- if .port -}}
{{- $ports = append $ports (int .port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $cidrs -}}
{{- fail "networkPolicy.egress.apiServer.cidrs is empty and the API server's addresses could not be looked up in the cluster (helm template, --dry-run=client or a tool that renders offline). Set them, e.g. --set-json 'networkPolicy.egress.apiServer.cidrs=[\"10.0.0.1/32\"]' from `kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[*].endpoints[*].addresses[*]}'`; or [\"0.0.0.0/0\",\"::/0\"] to admit every address on networkPolicy.egress.apiServer.ports; or networkPolicy.egress.enabled=false." -}}
{{- end -}}
{{- end -}}
{{- dict "cidrs" (uniq $cidrs) "ports" (uniq $ports) | toJson -}}
{{- end -}}
