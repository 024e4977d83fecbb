{{/* The release's base name: the release name when it already says lyra, else "<release>-lyra". */}}
{{- define "lyra.fullname" -}}
{{- if contains "lyra" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-lyra" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lyra.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: lyra
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "operator"). */}}
{{- define "lyra.selector" -}}
app.kubernetes.io/name: lyra
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "lyra.image" -}}
{{- include "lyra.imageRef" (dict "image" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{- define "lyra.extenderUrl" -}}
{{- $scheme := ternary "https" "http" .Values.extender.tls.enabled -}}
{{- printf "%s://%s-extender.%s.svc:%d" $scheme (include "lyra.fullname" .) .Release.Namespace (int .Values.extender.port) -}}
{{- end -}}

{{/* The extender's port name: https with extender.tls.enabled, else http (the ServiceMonitor scrapes both). */}}
{{- define "lyra.extenderPortName" -}}
{{- ternary "https" "http" .Values.extender.tls.enabled -}}
{{- end -}}

{{/* The Secret of the extender's serving certificate: extender.tls.secretName, or the one the chart generates. */}}
{{- define "lyra.extenderTlsSecret" -}}
{{- default (printf "%s-extender-tls" (include "lyra.fullname" .)) .Values.extender.tls.secretName -}}
{{- end -}}

{{/* The Secret whose ca.crt the extender's clients (the bundled scheduler, the ServiceMonitor) trust:
clientSecretName's, which also holds their client certificate, else the serving certificate's. With a client CA
the clients need a certificate: clientSecretName is required. */}}
{{- define "lyra.extenderCaSecret" -}}
{{- if .Values.extender.tls.clientCaConfigMap -}}
{{- required "extender.tls.clientSecretName: with extender.tls.clientCaConfigMap the extender serves only clients with a certificate; the bundled scheduler and the ServiceMonitor need a Secret with ca.crt, tls.crt and tls.key" .Values.extender.tls.clientSecretName -}}
{{- else -}}
{{- default (include "lyra.extenderTlsSecret" .) .Values.extender.tls.clientSecretName -}}
{{- end -}}
{{- end -}}

{{/* Pod security shared by every container: non-root, read-only root filesystem, nothing to escalate to. */}}
{{- define "lyra.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "lyra.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Where a component's pods run and their priority: (.Values.operator), (.Values.extender), ... */}}
{{- define "lyra.podPlacement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* The pod securityContext: the chart's non-root defaults with the component's podSecurityContext merged over them. */}}
{{- define "lyra.podSecurity" -}}
{{- mustMergeOverwrite (include "lyra.podSecurityContext" .root | fromYaml) .component.podSecurityContext | toYaml }}
{{- end -}}

{{/* The container securityContext: the chart's defaults with the component's securityContext merged over them. */}}
{{- define "lyra.containerSecurity" -}}
{{- mustMergeOverwrite (include "lyra.containerSecurityContext" .root | fromYaml) .component.securityContext | toYaml }}
{{- end -}}

{{/* A component's image reference: repository@digest when a digest is set, else repository:tag. */}}
{{- define "lyra.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "lyra.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}
