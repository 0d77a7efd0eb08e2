{{/* Names, labels and small computed values shared by every template. */}}

{{- define "semipd-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "semipd-operator.fullname" -}}
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

{{- define "semipd-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "semipd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "semipd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "semipd-operator.labels" -}}
helm.sh/chart: {{ include "semipd-operator.chart" . }}
{{ include "semipd-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: semipd
{{- end }}

{{- define "semipd-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "semipd-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image; a digest wins over the tag. */}}
{{- define "semipd-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "semipd-operator.tokenKeySecret" -}}
{{- if .Values.tokenKey.create }}
{{- printf "%s-token-key" (include "semipd-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- required "tokenKey.existingSecret is required when tokenKey.create=false" .Values.tokenKey.existingSecret }}
{{- end }}
{{- end }}

{{/* `k=v,k=v` as SEMIPD_POD_ANNOTATIONS expects (sorted, so renders are stable). */}}
{{- define "semipd-operator.enginePodAnnotations" -}}
{{- $items := list }}
{{- range $k, $v := .Values.operator.enginePodAnnotations }}
{{- if or (contains "," $k) (contains "," (toString $v)) (contains "=" $k) }}
{{- fail (printf "operator.enginePodAnnotations: %q cannot contain ',' (or '=' in the key)" $k) }}
{{- end }}
{{- $items = append $items (printf "%s=%s" $k (toString $v)) }}
{{- end }}
{{- join "," $items }}
{{- end }}
