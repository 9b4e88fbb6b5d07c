// Runs the SASE jar's engine on an event file written by bench/exact/sase.py (our code;
// it only calls the jar's public classes). Compile with javac -cp sase.jar.
//
// java -cp sase.jar:DIR Driver QUERY.nfa EVENTS.txt MATCHES.txt WARMUPS REPEATS
//
// Run 1 records every match (its event ids, one line per match, into MATCHES.txt); then
// WARMUPS untimed runs and REPEATS timed runs of the plain engine. Each timed run reports
// SASE's own timer (Profiling.totalRunTime: System.nanoTime around each event's step) and
// System.nanoTime around Engine.runEngine. The JSON goes to stdout.

import edu.umass.cs.sase.engine.ConfigFlags;
import edu.umass.cs.sase.engine.Engine;
import edu.umass.cs.sase.engine.Match;
import edu.umass.cs.sase.engine.Profiling;
import edu.umass.cs.sase.query.NFA;
import edu.umass.cs.sase.stream.Event;
import edu.umass.cs.sase.stream.StockEvent;
import edu.umass.cs.sase.stream.Stream;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.FileReader;
import java.io.FileWriter;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

public class Driver {

    /** The engine with every match's event ids written to a file as it is output. */
    static final class Recorder extends Engine {
        final BufferedWriter out;
        long count;
        long hash = 1125899906842597L;

        Recorder(BufferedWriter out) {
            this.out = out;
        }

        @Override
        public void outputMatch(Match match) {
            super.outputMatch(match);
            StringBuilder line = new StringBuilder();
            for (Event e : match.getEvents()) {
                if (line.length() > 0) {
                    line.append(' ');
                }
                line.append(e.getId());
                hash = 31 * hash + e.getId();
            }
            hash = 31 * hash - 1;
            count++;
            try {
                out.write(line.append('\n').toString());
            } catch (IOException err) {
                throw new RuntimeException(err);
            }
        }
    }

    static Event[] readEvents(String path) throws IOException {
        List<Event> events = new ArrayList<>();
        try (BufferedReader in = new BufferedReader(new FileReader(path))) {
            String line;
            int number = 0;
            while ((line = in.readLine()) != null) {
                number++;
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                String[] f = line.split(" ");
                if (f.length != 6) {
                    throw new IOException(path + ":" + number + ": expected 6 fields, got "
                                          + f.length);
                }
                events.add(new StockEvent(Integer.parseInt(f[0]), Integer.parseInt(f[1]),
                                          Integer.parseInt(f[3]), Integer.parseInt(f[4]),
                                          Integer.parseInt(f[5]), f[2]));
            }
        }
        return events.toArray(new Event[0]);
    }

    static Stream stream(Event[] events) {
        Stream s = new Stream(events.length);
        s.setEvents(events);
        return s;
    }

    static long[] run(Engine engine, NFA nfa, Event[] events) throws Exception {
        engine.setNfa(nfa);
        engine.initialize();
        engine.setInput(stream(events));
        long start = System.nanoTime();
        engine.runEngine();
        long wall = System.nanoTime() - start;
        return new long[] {Profiling.totalRunTime, wall, Profiling.numberOfMatches,
                           Profiling.numberOfRuns};
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: Driver QUERY.nfa EVENTS.txt MATCHES.txt WARMUPS REPEATS");
            System.exit(2);
        }
        ConfigFlags.printResults = false;  // the jar prints every match by default
        NFA nfa = new NFA(args[0]);
        Event[] events = readEvents(args[1]);
        int warmups = Integer.parseInt(args[3]);
        int repeats = Integer.parseInt(args[4]);
        Recorder recorder;
        try (BufferedWriter out = new BufferedWriter(new FileWriter(args[2]))) {
            recorder = new Recorder(out);
            run(recorder, nfa, events);
        }
        for (int i = 0; i < warmups; i++) {
            run(new Engine(), nfa, events);
        }
        StringBuilder json = new StringBuilder();
        json.append("{\"events\": ").append(events.length)
            .append(", \"matches\": ").append(recorder.count)
            .append(", \"match_hash\": ").append(recorder.hash)
            .append(", \"warmups\": ").append(warmups)
            .append(", \"java\": \"").append(System.getProperty("java.version"))
            .append("\", \"repeats\": [");
        for (int i = 0; i < repeats; i++) {
            long[] r = run(new Engine(), nfa, events);
            json.append(i > 0 ? ", " : "")
                .append("{\"sase_timer_ns\": ").append(r[0])
                .append(", \"wall_ns\": ").append(r[1])
                .append(", \"matches\": ").append(r[2])
                .append(", \"runs\": ").append(r[3]).append('}');
        }
        System.out.println(json.append("]}"));
    }
}
